package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportException;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;

/**
 * The process-wide MPI state: {@code MPI_Init_thread(MPI_THREAD_MULTIPLE)} once, the communicators every
 * manager and group shares, the tag mapping, and {@code MPI_Finalize} at JVM shutdown (or at
 * {@link #shutdown()}).
 *
 * <p>Communicators, all duplicated from {@code MPI_COMM_WORLD} right after init (collective, like init):
 * <ul>
 *   <li>control: protocol tags below {@link Tags#FIRST_DATA_TAG}, MPI tag = our tag;</li>
 *   <li>data: tags from {@link Tags#FIRST_DATA_TAG}, MPI tag = {@code (tag - FIRST_DATA_TAG) mod (TAG_UB + 1)};
 *       with Open MPI's ob1 {@code TAG_UB = 2^31-1}, so the map is one-to-one; a smaller {@code TAG_UB}
 *       folds, and two data tags that fold together must not be in flight between the same pair at once;</li>
 *   <li>group setup: the {@code (color, key)} exchange that precedes {@code MPI_Comm_split} in
 *       {@link MpiGroupComm}, so that collective never meets point-to-point traffic.</li>
 * </ul>
 */
public final class MpiRuntime {
    private static final Object LOCK = new Object();
    private static volatile MpiRuntime instance;
    private static volatile Throwable initFailure;

    private final int worldRank;
    private final int worldSize;
    private final int tagUpperBound;
    private final String libraryVersion;
    private final int controlComm;
    private final int dataComm;
    private final int groupSetupComm;
    /** Calls inside MPI right now (managers and groups); finalize waits for zero. */
    private final AtomicInteger active = new AtomicInteger();
    private final Set<AutoCloseable> users = ConcurrentHashMap.newKeySet();
    private volatile boolean finalizing;

    private MpiRuntime() {
        int provided = MpiNative.initThread(MpiNative.threadMultiple());
        if (provided < MpiNative.threadMultiple()) {
            // Without MULTIPLE, concurrent sends/receives from different threads are undefined behaviour.
            throw new IllegalStateException("MPI granted thread level " + provided + " < MPI_THREAD_MULTIPLE ("
                    + MpiNative.threadMultiple() + "); backend-mpi needs MPI_THREAD_MULTIPLE ("
                    + MpiNative.libraryVersion() + ")");
        }
        int world = MpiNative.commWorld();
        this.worldRank = MpiNative.commRank(world);
        this.worldSize = MpiNative.commSize(world);
        this.tagUpperBound = MpiNative.tagUpperBound();
        this.libraryVersion = MpiNative.libraryVersion();
        this.controlComm = MpiNative.commDup(world);
        this.dataComm = MpiNative.commDup(world);
        this.groupSetupComm = MpiNative.commDup(world);
        Thread hook = new Thread(MpiRuntime::shutdown, "kvtransfer-mpi-finalize");
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /**
     * Initializes MPI on first use (collective over {@code MPI_COMM_WORLD}: every rank of the job must get here).
     *
     * @return the runtime
     * @throws TransportException ({@code NETWORK}) when the library is missing or MPI cannot start
     */
    public static MpiRuntime get() {
        MpiRuntime rt = instance;
        if (rt != null && !rt.finalizing) {
            return rt;
        }
        synchronized (LOCK) {
            if (instance != null && instance.finalizing) {
                throw new TransportException(ErrorCode.NETWORK, "MPI was finalized in this process (rank "
                        + instance.worldRank + "); it cannot be initialized again");
            }
            if (instance != null) {
                return instance;
            }
            if (initFailure != null) {
                throw new TransportException(ErrorCode.NETWORK, "MPI is not usable: " + initFailure.getMessage(),
                        initFailure);
            }
            Throwable loadFailure = MpiNative.loadFailure();
            if (loadFailure != null) {
                throw new TransportException(ErrorCode.NETWORK, "MPI native library not loaded: "
                        + loadFailure.getMessage(), loadFailure);
            }
            try {
                instance = new MpiRuntime();
                return instance;
            } catch (RuntimeException e) {
                initFailure = e;
                throw new TransportException(ErrorCode.NETWORK, "MPI initialization failed: " + e.getMessage(), e);
            }
        }
    }

    /** @return whether MPI was initialized in this process (and not finalized) */
    public static boolean isInitialized() {
        MpiRuntime rt = instance;
        return rt != null && !rt.finalizing;
    }

    /**
     * Closes every open manager and group, waits (bounded) for calls inside MPI to leave, and finalizes MPI.
     * Runs at JVM shutdown; call it earlier to finalize explicitly. Idempotent; MPI cannot be used afterwards.
     */
    public static void shutdown() {
        MpiRuntime rt;
        synchronized (LOCK) {
            rt = instance;
            if (rt == null || rt.finalizing) {
                return;
            }
            rt.finalizing = true;
        }
        for (AutoCloseable user : rt.users) {
            try {
                user.close();
            } catch (Exception e) {
                // Finalize must still run; the failure is reported, not swallowed.
                System.err.println("kvtransfer-mpi: closing " + user + " before MPI_Finalize failed: " + e);
            }
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (rt.active.get() > 0 && System.nanoTime() - deadline < 0) {
            LockSupport.parkNanos(100_000);
        }
        if (rt.active.get() > 0) {
            System.err.println("kvtransfer-mpi: " + rt.active.get() + " call(s) still inside MPI after 5 s;"
                    + " not finalizing (MPI would fail under them)");
            return;
        }
        MpiNative.finalizeMpi();
    }

    /** @return this process's rank in {@code MPI_COMM_WORLD} */
    public int worldRank() {
        return worldRank;
    }

    /** @return the number of ranks in {@code MPI_COMM_WORLD} */
    public int worldSize() {
        return worldSize;
    }

    /** @return {@code MPI_TAG_UB} */
    public int tagUpperBound() {
        return tagUpperBound;
    }

    /** @return the first line of {@code MPI_Get_library_version} */
    public String libraryVersion() {
        return libraryVersion;
    }

    int groupSetupComm() {
        return groupSetupComm;
    }

    /**
     * The communicator that carries a tag.
     *
     * @param tag our tag, {@code >= 0}
     * @return the communicator handle
     */
    int commFor(int tag) {
        return tag < Tags.FIRST_DATA_TAG ? controlComm : dataComm;
    }

    /**
     * The MPI tag that carries our tag on {@link #commFor(int)}.
     *
     * @param tag our tag, {@code >= 0}
     * @return the MPI tag, in {@code [0, TAG_UB]}
     */
    int mpiTagFor(int tag) {
        if (tag < 0) {
            throw new IllegalArgumentException("tag = " + tag + ": must be >= 0");
        }
        if (tag < Tags.FIRST_DATA_TAG) {
            return tag;
        }
        long span = (long) tagUpperBound + 1;
        return (int) ((tag - (long) Tags.FIRST_DATA_TAG) % span);
    }

    /** @return false when finalizing: the caller must not enter MPI */
    boolean enter() {
        active.incrementAndGet();
        if (finalizing) {
            active.decrementAndGet();
            return false;
        }
        return true;
    }

    void exit() {
        active.decrementAndGet();
    }

    boolean finalizing() {
        return finalizing;
    }

    void register(AutoCloseable user) {
        users.add(user);
    }

    void unregister(AutoCloseable user) {
        users.remove(user);
    }
}
