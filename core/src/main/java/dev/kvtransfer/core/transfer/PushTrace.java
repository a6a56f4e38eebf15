package dev.kvtransfer.core.transfer;

/**
 * A diagnostic of the push and layer-wise paths: with {@code -Dkvtransfer.pushTrace=true} each step of a request
 * (engine marks a layer ready, the sender sees it, its writes completed, the generation side's notices, the final
 * check) prints one line {@code PT <role> <request> <event> <layer> <System.nanoTime()> <thread>} to standard
 * error. {@code System.nanoTime()} is the host's monotonic clock, so the lines of the two processes of a
 * cross-process demo line up. Off by default: then each call is one read of a constant.
 */
public final class PushTrace {
    /** Whether tracing is on ({@code -Dkvtransfer.pushTrace=true}, read once). */
    public static final boolean ON = Boolean.getBoolean("kvtransfer.pushTrace");

    private PushTrace() {
    }

    /**
     * Prints one trace line when tracing is on.
     *
     * @param role    {@code eng}, {@code ctx} or {@code gen}
     * @param request the request id
     * @param event   what happened
     * @param layer   the layer it concerns, or -1
     */
    public static void at(String role, long request, String event, int layer) {
        if (ON) {
            System.err.println("PT " + role + " " + request + " " + event + " " + layer + " " + System.nanoTime()
                    + " " + Thread.currentThread().getName());
        }
    }
}
