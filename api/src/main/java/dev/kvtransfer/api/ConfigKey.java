package dev.kvtransfer.api;

import java.util.Objects;

/**
 * One configuration key as a settings class documents it: the key, its default, the values it accepts and what it
 * does. Settings classes publish a list of these next to their key constants, so a reference page can be generated
 * from the code and checked against it.
 *
 * @param name         the full key, e.g. {@code kvtransfer.backend}; a key ending in {@code .} stands for a family
 *                     of keys (the rest of the name is free)
 * @param defaultValue the value used when the key is not set, as it would be written (may be empty)
 * @param range        the values accepted, in words (e.g. {@code [1, 1024]}, {@code pull | push})
 * @param meaning      one or two sentences: what the key changes
 */
public record ConfigKey(String name, String defaultValue, String range, String meaning) {
    /**
     * Checks that every part is present.
     *
     * @throws NullPointerException naming the missing part
     */
    public ConfigKey {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(defaultValue, "defaultValue");
        Objects.requireNonNull(range, "range");
        Objects.requireNonNull(meaning, "meaning");
    }
}
