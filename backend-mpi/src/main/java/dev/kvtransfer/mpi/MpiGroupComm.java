package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.sync.GroupComm;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.locks.LockSupport;

/**
 * A {@link GroupComm} over an MPI sub-communicator of {@code MPI_COMM_WORLD}, e.g. the TP group of one PP
 * stage of one instance, so the status checks of ranks in different processes agree.
 *
 * <p>{@link #allgather} is {@code MPI_Iallgather} of the lengths then {@code MPI_Iallgatherv} of the values,
 * polled until the deadline. An MPI collective cannot be cancelled: after a {@code TIMEOUT} the round stays
 * posted, and the next call first finishes it (its result is dropped), so members stay in step as long as
 * everyone keeps calling in the same order.
 */
public final class MpiGroupComm implements GroupComm {
    private static final Object SPLIT_LOCK = new Object();
    private static volatile String splitBroken;

    private final MpiRuntime runtime;
    private final int comm;
    private final int rank;
    private final int size;
    private final int color;
    private long pending;
    private volatile boolean closed;

    private MpiGroupComm(MpiRuntime runtime, int comm, int color) {
        this.runtime = runtime;
        this.comm = comm;
        this.color = color;
        this.rank = MpiNative.commRank(comm);
        this.size = MpiNative.commSize(comm);
    }

    /**
     * Forms groups out of {@code MPI_COMM_WORLD}: ranks with the same {@code color} form one group, ordered by
     * {@code key} (then world rank). Collective over the whole world: every rank calls it, in the same order
     * relative to other splits. The {@code (color, key)} exchange runs non-blocking with the deadline; only
     * when every rank has arrived does the (blocking) {@code MPI_Comm_split} run, which then completes at once.
     * A timeout leaves group formation unusable in this process (the exchange cannot be withdrawn).
     *
     * @param color   group id, {@code >= 0}
     * @param key     order inside the group
     * @param timeout how long to wait for every rank
     * @return this rank's group
     * @throws KvTransferException {@code TIMEOUT} when some rank did not arrive in time
     */
    public static MpiGroupComm split(int color, int key, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (color < 0) {
            throw new IllegalArgumentException("color = " + color + ": must be >= 0");
        }
        MpiRuntime rt = MpiRuntime.get();
        synchronized (SPLIT_LOCK) {
            if (splitBroken != null) {
                throw new KvTransferException(ErrorCode.INTERNAL, KvTransferException.NO_REQUEST,
                        "MPI group formation is unusable in this process: " + splitBroken, null);
            }
            if (!rt.enter()) {
                throw new IllegalStateException("MPI is finalizing");
            }
            try {
                long handle = MpiNative.allgatherStart(rt.groupSetupComm(), new long[] {color, key});
                long deadline = System.nanoTime() + timeout.toNanos();
                if (!drive(handle, deadline)) {
                    splitBroken = "a split (color " + color + ", key " + key + ") timed out after " + timeout;
                    throw new KvTransferException(ErrorCode.TIMEOUT, KvTransferException.NO_REQUEST,
                            "MPI group split timed out after " + timeout + " on world rank " + rt.worldRank()
                                    + ": not every rank of MPI_COMM_WORLD called split", null);
                }
                MpiNative.allgatherResult(handle);
                int comm = MpiNative.commSplit(MpiNative.commWorld(), color, key);
                MpiGroupComm group = new MpiGroupComm(rt, comm, color);
                rt.register(group);
                return group;
            } catch (MpiNative.MpiCallException e) {
                throw new KvTransferException(ErrorCode.NETWORK, KvTransferException.NO_REQUEST,
                        "MPI group split failed: " + e.getMessage(), e);
            } finally {
                rt.exit();
            }
        }
    }

    /**
     * The whole world as one group.
     *
     * @param timeout how long to wait for every rank
     * @return the group of all ranks
     */
    public static MpiGroupComm world(Duration timeout) {
        return split(0, MpiRuntime.get().worldRank(), timeout);
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int size() {
        return size;
    }

    @Override
    public synchronized List<long[]> allgather(long[] values, Duration timeout) {
        Objects.requireNonNull(values, "values");
        Objects.requireNonNull(timeout, "timeout");
        if (closed) {
            throw new IllegalStateException(this + " is closed");
        }
        if (!runtime.enter()) {
            throw new IllegalStateException("MPI is finalizing");
        }
        try {
            long deadline = System.nanoTime() + timeout.toNanos();
            if (pending != 0) {
                // A round that timed out earlier: the others completed it with us; finish it to stay in step.
                if (!drive(pending, deadline)) {
                    throw timeout("an earlier allgather round is still incomplete", timeout);
                }
                MpiNative.allgatherResult(pending);
                pending = 0;
            }
            pending = MpiNative.allgatherStart(comm, values);
            if (!drive(pending, deadline)) {
                throw timeout("not every member contributed", timeout);
            }
            long[][] all = MpiNative.allgatherResult(pending);
            pending = 0;
            return Arrays.asList(all);
        } catch (MpiNative.MpiCallException e) {
            throw new KvTransferException(ErrorCode.NETWORK, KvTransferException.NO_REQUEST,
                    this + ": allgather failed: " + e.getMessage(), e);
        } finally {
            runtime.exit();
        }
    }

    private KvTransferException timeout(String why, Duration timeout) {
        return new KvTransferException(ErrorCode.TIMEOUT, KvTransferException.NO_REQUEST,
                this + ": allgather timed out after " + timeout + ": " + why, null);
    }

    /** @return true when done, false at the deadline (or when closed) */
    private static boolean drive(long handle, long deadline) {
        int idle = 0;
        while (MpiNative.allgatherProgress(handle) == 0) {
            if (System.nanoTime() - deadline >= 0) {
                return false;
            }
            // Collectives are latency-bound and ranks are often oversubscribed: spin briefly, then park.
            if (++idle > 200) {
                LockSupport.parkNanos(Math.min(200_000, 1_000L << Math.min(idle - 200, 8)));
            } else {
                Thread.onSpinWait();
            }
        }
        return true;
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        runtime.unregister(this);
        // MPI_Comm_free is only legal without pending operations; otherwise the communicator is left to
        // MPI_Finalize.
        if (pending == 0 && runtime.enter()) {
            try {
                MpiNative.commFree(comm);
            } finally {
                runtime.exit();
            }
        }
    }

    @Override
    public String toString() {
        return "MpiGroupComm{color " + color + ", rank " + rank + "/" + size + ", world rank "
                + runtime.worldRank() + "}";
    }
}
