package dev.kvtransfer.fuzz;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

import java.lang.management.ManagementFactory;

/**
 * The contract every fuzz target checks: a decoder of hostile bytes either decodes them or fails with the
 * project's documented exception, and never allocates in proportion to a length the input claims (measured
 * with the thread's allocation counter). Anything else escapes as an {@link AssertionError}, which Jazzer
 * reports as a finding (and, in regression mode, JUnit as a failure).
 */
public final class Contract {
    /** Allocation any decode may make whatever its input (objects, strings, small tables). */
    public static final long BASE_ALLOCATION = 4L << 20;
    /** Allocation allowed per input byte (a decoded copy of every byte a few times over, boxed lists). */
    public static final long PER_INPUT_BYTE = 64;

    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    private Contract() {
    }

    /** A decode that may throw anything; the contract decides what is allowed. */
    @FunctionalInterface
    public interface Decode {
        /**
         * @throws Throwable whatever the decoder throws
         */
        void run() throws Throwable;
    }

    /**
     * Runs a decode of {@code inputBytes} bytes: it may return, or throw {@link KvTransferException} with
     * {@link ErrorCode#MALFORMED} (a {@code MalformedMessageException} is one); anything else fails.
     *
     * @param inputBytes the input's length, for the allocation bound
     * @param decode     the decode
     * @return the exception it threw (allowed), or null
     */
    public static KvTransferException malformedOnly(int inputBytes, Decode decode) {
        Throwable t = measured(inputBytes, decode);
        if (t == null) {
            return null;
        }
        if (t instanceof KvTransferException k && k.code() == ErrorCode.MALFORMED) {
            return k;
        }
        throw new AssertionError("decode failed with " + t + " (only KvTransferException MALFORMED is allowed)", t);
    }

    /**
     * Runs a decode that may fail only with one of {@code allowed}.
     *
     * @param inputBytes the input's length
     * @param decode     the decode
     * @param allowed    the exception types its documentation names
     * @return the exception it threw (allowed), or null
     */
    @SafeVarargs
    public static Throwable only(int inputBytes, Decode decode, Class<? extends Throwable>... allowed) {
        Throwable t = measured(inputBytes, decode);
        if (t == null) {
            return null;
        }
        for (Class<? extends Throwable> c : allowed) {
            if (c.isInstance(t)) {
                return t;
            }
        }
        throw new AssertionError("decode failed with " + t + " (allowed: " + java.util.Arrays.toString(allowed)
                + ")", t);
    }

    /**
     * As {@link #only} with an allocation bound of its own (a decoder whose library allocates more than
     * {@link #BASE_ALLOCATION} by design; the target says why).
     *
     * @param bound   bytes the decode may allocate
     * @param decode  the decode
     * @param allowed the exception types its documentation names
     * @return the exception it threw (allowed), or null
     */
    @SafeVarargs
    public static Throwable onlyWithin(long bound, Decode decode, Class<? extends Throwable>... allowed) {
        Throwable t = measured(-1, bound, decode);
        if (t == null) {
            return null;
        }
        for (Class<? extends Throwable> c : allowed) {
            if (c.isInstance(t)) {
                return t;
            }
        }
        throw new AssertionError("decode failed with " + t + " (allowed: " + java.util.Arrays.toString(allowed)
                + ")", t);
    }

    private static Throwable measured(int inputBytes, Decode decode) {
        return measured(inputBytes, BASE_ALLOCATION + PER_INPUT_BYTE * inputBytes, decode);
    }

    private static Throwable measured(int inputBytes, long bound, Decode decode) {
        Throwable thrown = null;
        long allocated = 0;
        // A first decode may load and initialise classes (and Jazzer instruments them): over the bound, it is
        // measured once more, and only the second measure counts.
        for (int attempt = 0; attempt < 2; attempt++) {
            long before = THREADS.getCurrentThreadAllocatedBytes();
            thrown = null;
            try {
                decode.run();
            } catch (Throwable t) {
                thrown = t;
            }
            allocated = THREADS.getCurrentThreadAllocatedBytes() - before;
            if (allocated <= bound) {
                break;
            }
        }
        if (allocated > bound) {
            throw new AssertionError("decoding " + inputBytes + " bytes allocated " + allocated + " bytes (bound "
                    + bound + "): an allocation sized by a claimed length", thrown);
        }
        if (thrown instanceof VirtualMachineError e) {
            throw new AssertionError("decode failed with " + e, e);
        }
        return thrown;
    }
}
