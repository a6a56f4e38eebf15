package dev.kvtransfer.mpi;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The JNI binding ({@code src/main/c/kvmpi.c}, built by {@code mpicc} into {@code libkvmpi.so} and packaged
 * under {@code native/linux-x86_64/}). Loading is attempted once; {@link #loadFailure()} says why it failed,
 * so the provider can report the cause instead of crashing.
 *
 * <p>Handles: communicators are {@code MPI_Comm_c2f} integers; requests and matched messages are native cells
 * passed as {@code long}; payload is a raw off-heap address.
 */
final class MpiNative {
    /** Resource path of the library inside the jar (or target/classes). */
    static final String LIBRARY_RESOURCE = "/native/linux-x86_64/libkvmpi.so";
    /** System property naming a library file to load instead of the packaged one. */
    static final String LIBRARY_PATH_PROPERTY = "kvtransfer.mpi.library";

    private static final Throwable LOAD_FAILURE = load();

    private MpiNative() {
    }

    /** An MPI call returned an error (the job is not aborted: every communicator uses MPI_ERRORS_RETURN). */
    static final class MpiCallException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int errorCode;

        MpiCallException(int errorCode, String message) {
            super(message);
            this.errorCode = errorCode;
        }

        int errorCode() {
            return errorCode;
        }
    }

    /** @return null when the library is loaded, else why not */
    static Throwable loadFailure() {
        return LOAD_FAILURE;
    }

    private static Throwable load() {
        try {
            String explicit = System.getProperty(LIBRARY_PATH_PROPERTY);
            if (explicit != null && !explicit.isBlank()) {
                System.load(Path.of(explicit).toAbsolutePath().toString());
                return null;
            }
            String arch = System.getProperty("os.arch");
            if (!"Linux".equals(System.getProperty("os.name")) || !("amd64".equals(arch) || "x86_64".equals(arch))) {
                return new UnsupportedOperationException("libkvmpi is built for linux-x86_64 only, this is "
                        + System.getProperty("os.name") + "/" + arch);
            }
            try (InputStream in = MpiNative.class.getResourceAsStream(LIBRARY_RESOURCE)) {
                if (in == null) {
                    return new IllegalStateException("native library " + LIBRARY_RESOURCE
                            + " is not on the class path: backend-mpi was built without mpicc"
                            + " (install libopenmpi-dev and rebuild)");
                }
                // Extracted to a private temp file: System.load needs a file, and a jar entry is not one.
                Path tmp = Files.createTempFile("libkvmpi-", ".so");
                tmp.toFile().deleteOnExit();
                Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
                System.load(tmp.toAbsolutePath().toString());
                return null;
            }
        } catch (IOException | RuntimeException | UnsatisfiedLinkError e) {
            return e;
        }
    }

    // lifecycle
    static native int initThread(int required);

    static native int threadMultiple();

    static native void finalizeMpi();

    static native boolean isFinalized();

    static native String libraryVersion();

    static native int tagUpperBound();

    // communicators
    static native int commWorld();

    static native int commRank(int comm);

    static native int commSize(int comm);

    static native int commDup(int comm);

    static native int commSplit(int comm, int color, int key);

    static native void commFree(int comm);

    // point to point
    /** copy: send from a private copy of the bytes (eager: the caller's memory is free on return). */
    static native long isend(long address, int count, int dest, int tag, int comm, boolean copy);

    /** source or tag -1: any. out: source, byte count, MPI tag. @return the matched message, or 0 */
    static native long improbe(int source, int tag, int comm, long[] out, long spinNanos);

    /** An envelope: header and payload copied into one private buffer, sent as one MPI message. */
    static native long isendEnvelope(long header, int headerBytes, long payload, int payloadBytes, int dest, int tag,
                                     int comm);

    /** @return 1 received, 0 not within waitNanos (MPI keeps the buffer: never reuse it) */
    static native int recvMatched(long address, int count, long message, long waitNanos);

    static native void copy(long from, long to, long bytes);

    static native long addressOf(java.nio.ByteBuffer direct);

    // dynamic process management: links to processes of other MPI worlds
    /** Opens a port and starts the native acceptor; @return the port name */
    static native String dpmListen(String worldId, int worldRank);

    /** @return whether the acceptor runs */
    static native boolean dpmListening();

    /** out: envelope comm, data comm, intercomm, remote world id, remote world rank, 1. @return 1 when one was taken */
    static native int dpmAccepted(long[] out);

    /** Blocks until connected (no timeout in MPI). out as {@link #dpmAccepted}. */
    static native void dpmConnect(String port, String worldId, int worldRank, long[] out);

    /** @return whether this process only inherited an mpirun rank's environment (checked without MPI) */
    static native boolean inheritedRankEnvironment();

    /** @return whether init found an inherited rank environment and initialized as a singleton */
    static native boolean detachedFromParentRank();

    static native long imrecv(long address, int count, long message);

    /** @return 1 completed, 2 completed truncated (not expected: receives use the probed size), 0 pending */
    static native int test(long request, long spinNanos);

    /** @return 1 completed or cancelled, 0 released to finish in the background */
    static native int cancel(long request, long waitNanos);

    /** Releases a request to complete in the background (no cancel). */
    static native void requestFree(long request);

    // one-sided writes: one dynamic window per process (collective create), passive-target epoch for life
    static native int rmaCreate();

    static native void rmaFree();

    static native void rmaAttach(long address, long bytes);

    static native void rmaDetach(long address);

    /** Starts puts (pieces of at most 1 GiB) to rank's absolute address; complete them with {@link #rmaFlush}. */
    static native void rmaPut(long from, long bytes, int rank, long target);

    static native void rmaFlush(int rank);

    // allgather of variable-length long[]
    static native long allgatherStart(int comm, long[] values);

    static native int allgatherProgress(long handle);

    static native long[][] allgatherResult(long handle);

    // page-aligned host memory (tools and tests)
    static native long allocate(long bytes);

    static native void release(long address);

    static native ByteBuffer wrap(long address, long bytes);
}
