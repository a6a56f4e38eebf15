package dev.kvtransfer.api.format;

import java.util.Objects;

/**
 * Whether a formatter can convert between two cache layouts, and if not, why.
 *
 * @param supported whether it can
 * @param reason    why not (empty when supported)
 */
public record Support(boolean supported, String reason) {
    private static final Support YES = new Support(true, "");

    /**
     * Checks the reason.
     *
     * @param supported whether it can
     * @param reason    why not
     */
    public Support {
        Objects.requireNonNull(reason, "reason");
    }

    /** @return the supported answer */
    public static Support yes() {
        return YES;
    }

    /**
     * An unsupported answer.
     *
     * @param reason why, naming the fields and values
     * @return the answer
     */
    public static Support no(String reason) {
        return new Support(false, reason);
    }
}
