package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.ConfigKey;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;

import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The {@code "cuda"} memory plugin: {@link CudaBufferManager}s for {@link MemoryKind#DEVICE} and
 * {@link MemoryKind#PINNED_HOST} memory (copying to and from {@link MemoryKind#HOST} buffers of any manager).
 *
 * <p>Constructing it touches no native code; the first {@link #isAvailable()}, {@link #unavailabilityCause()} or
 * {@link #create} loads JCuda and asks the driver once per process, and never throws from the first two.
 *
 * <p>Properties ({@link #create}): {@value #DEVICE} (device ordinal, default 0), {@value #SYNC_TIMEOUT_MS}
 * (deadline of {@link BufferManager#synchronize()} and of the wait before a buffer is freed, default 60000) and
 * {@value #DEBUG} ({@code true}: leak reports carry allocation stacks; default: the system property
 * {@value CudaBufferManager#DEBUG_PROPERTY}). Other {@code cuda.*} keys are refused; keys of other prefixes are
 * left to their owners.
 */
public final class CudaMemoryProvider implements MemoryProvider {
    /** The provider name. */
    public static final String NAME = "cuda";
    /** Prefix of this provider's properties. */
    public static final String PREFIX = "cuda.";
    /** Device ordinal property. */
    public static final String DEVICE = "cuda.device";
    /** Synchronize deadline property, milliseconds. */
    public static final String SYNC_TIMEOUT_MS = "cuda.syncTimeoutMs";
    /** Allocation-site capture property. */
    public static final String DEBUG = "cuda.debug";
    /** Every property this provider knows. */
    public static final List<String> KNOWN_PROPERTIES = List.of(DEVICE, SYNC_TIMEOUT_MS, DEBUG);
    /** Every property with its default, accepted values and meaning: the source of {@code docs/configuration.md}. */
    public static final List<ConfigKey> CONFIG_KEYS = List.of(
            new ConfigKey(DEVICE, "0", ">= 0", "CUDA device ordinal the buffers are allocated on."),
            new ConfigKey(SYNC_TIMEOUT_MS, Long.toString(CudaBufferManager.DEFAULT_SYNC_TIMEOUT.toMillis()), "> 0 ms",
                    "Deadline of synchronize() and of the wait before a buffer is freed."),
            new ConfigKey(DEBUG, "the system property " + CudaBufferManager.DEBUG_PROPERTY, "true | false",
                    "Whether leak reports carry the allocation stack of each outstanding buffer."));

    /** Discovered by {@link java.util.ServiceLoader}; touches nothing native. */
    public CudaMemoryProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean isAvailable() {
        return CudaProbe.result().available();
    }

    @Override
    public String unavailabilityCause() {
        return CudaProbe.result().cause;
    }

    /** @return the number of CUDA devices visible to this process (0 when unavailable) */
    public int deviceCount() {
        return CudaProbe.result().deviceCount;
    }

    @Override
    public Set<MemoryKind> kinds() {
        return EnumSet.of(MemoryKind.DEVICE, MemoryKind.PINNED_HOST, MemoryKind.HOST);
    }

    /**
     * Creates a manager on the configured device. Properties are validated before CUDA is asked, so a wrong key
     * is reported the same way on every machine.
     *
     * @throws IllegalArgumentException naming the key for an unknown {@code cuda.*} key or a bad value, or a
     *                                  device this machine does not have
     * @throws IllegalStateException    with the cause when CUDA is not available
     */
    @Override
    public CudaBufferManager create(Map<String, String> properties) {
        Settings s = Settings.parse(properties);
        CudaProbe.requireAvailable();
        return new CudaBufferManager(s.device, s.syncTimeout, s.debug);
    }

    @Override
    public String toString() {
        return "CudaMemoryProvider{" + NAME + "}";
    }

    /** Validated properties. */
    static final class Settings {
        final int device;
        final Duration syncTimeout;
        final boolean debug;

        private Settings(int device, Duration syncTimeout, boolean debug) {
            this.device = device;
            this.syncTimeout = syncTimeout;
            this.debug = debug;
        }

        static Settings parse(Map<String, String> properties) {
            Objects.requireNonNull(properties, "properties");
            for (String key : properties.keySet()) {
                Objects.requireNonNull(key, "property key");
                if (key.startsWith(PREFIX) && !KNOWN_PROPERTIES.contains(key)) {
                    throw new IllegalArgumentException("unknown property " + key + " for memory provider " + NAME
                            + "; known: " + String.join(", ", KNOWN_PROPERTIES));
                }
            }
            int device = (int) longValue(properties, DEVICE, 0, 0, Integer.MAX_VALUE);
            long timeoutMs = longValue(properties, SYNC_TIMEOUT_MS, CudaBufferManager.DEFAULT_SYNC_TIMEOUT.toMillis(),
                    1, Long.MAX_VALUE / 1_000_000);
            String debugText = properties.get(DEBUG);
            boolean debug;
            if (debugText == null) {
                debug = Boolean.getBoolean(CudaBufferManager.DEBUG_PROPERTY);
            } else if (debugText.trim().equalsIgnoreCase("true") || debugText.trim().equalsIgnoreCase("false")) {
                debug = Boolean.parseBoolean(debugText.trim());
            } else {
                throw new IllegalArgumentException(DEBUG + " = '" + debugText + "': must be true or false");
            }
            return new Settings(device, Duration.ofMillis(timeoutMs), debug);
        }

        private static long longValue(Map<String, String> p, String key, long dflt, long min, long max) {
            String text = p.get(key);
            if (text == null) {
                return dflt;
            }
            long v;
            try {
                v = Long.parseLong(text.trim());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(key + " = '" + text + "': not an integer", e);
            }
            if (v < min || v > max) {
                throw new IllegalArgumentException(key + " = " + v + ": must be in [" + min + ", " + max + "]");
            }
            return v;
        }
    }
}
