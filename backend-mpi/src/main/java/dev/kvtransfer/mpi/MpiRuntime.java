package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;
import org.agrona.concurrent.status.ConcurrentCountersManager;
import org.agrona.concurrent.status.CountersReader;

import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;

/**
 * The process-wide MPI state: {@code MPI_Init_thread(MPI_THREAD_MULTIPLE)} once, the communicators every
 * endpoint and group shares, the open endpoints, the progress agent, the one-sided window, counters, and
 * {@code MPI_Finalize} at JVM shutdown (or at {@link #shutdown()}).
 *
 * <p>Communicators, all duplicated from {@code MPI_COMM_WORLD} right after init (collective, like init):
 * <ul>
 *   <li>envelopes: every message's header (and an inline payload), MPI tag = destination endpoint;</li>
 *   <li>data: payloads of larger messages, MPI tag = a per-process sequence number chosen by the sender and
 *       carried in the envelope (unique until {@code MPI_TAG_UB + 1} messages are in flight from one rank);</li>
 *   <li>group setup: the {@code (color, key)} exchange that precedes {@code MPI_Comm_split} in
 *       {@link MpiGroupComm}, so that collective never meets point-to-point traffic.</li>
 * </ul>
 * Endpoints are created locally (no collective), numbered from 0 per process and never reused.
 *
 * <p>The progress agent runs while at least one endpoint is open: the first {@code open} starts it (thread
 * {@code kvtransfer-mpi-progress}), the last {@code close} stops it and waits for its thread to end.
 */
public final class MpiRuntime {
    private static final Object LOCK = new Object();
    private static volatile MpiRuntime instance;
    private static volatile Throwable initFailure;
    /** Repeated errors of one kind are reported at most once per this interval. */
    private static final long REPORT_INTERVAL_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final int worldRank;
    private final int worldSize;
    private final int tagUpperBound;
    private final String libraryVersion;
    private final boolean detachedFromParentRank;
    private final String worldId;
    private final MpiLinks links;
    private final boolean qualifiedAddresses;
    private final String rmaFailure;
    private final int envelopeComm;
    private final int dataComm;
    private final int groupSetupComm;
    /** Calls inside MPI right now (managers, groups, the agent); finalize waits for zero. */
    private final AtomicInteger active = new AtomicInteger();
    private final Set<AutoCloseable> users = ConcurrentHashMap.newKeySet();
    private final AtomicInteger payloadTags = new AtomicInteger();
    private final AtomicInteger waitingReceives = new AtomicInteger();
    private final Counters counters = new Counters();
    private final Map<String, long[]> lastReports = new ConcurrentHashMap<>();
    /** Open endpoints by id (closed ones null); replaced on change, read lock-free by the agent. */
    private volatile MpiEndpoint[] endpoints = new MpiEndpoint[8];
    private volatile int nextEndpoint;
    private int openEndpoints;
    private final Object endpointLock = new Object();
    private AgentRunner agentRunner;
    private volatile Thread agentThread;
    private final Object eagerLock = new Object();
    private long[] eagerPending = new long[64];
    private MpiConnectionManager[] eagerOwners = new MpiConnectionManager[64];
    private int eagerCount;
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
        this.detachedFromParentRank = MpiNative.detachedFromParentRank();
        this.envelopeComm = MpiNative.commDup(world);
        this.dataComm = MpiNative.commDup(world);
        this.groupSetupComm = MpiNative.commDup(world);
        this.worldId = agreeWorldId(groupSetupComm);
        // A singleton not started by mpirun listens for links from other worlds when ompi-server is configured.
        boolean singleton = detachedFromParentRank || System.getenv("OMPI_COMM_WORLD_SIZE") == null;
        this.qualifiedAddresses = singleton;
        String rma = null;
        try {
            MpiNative.rmaCreate();
        } catch (RuntimeException e) {
            // osc rdma needs a peer to reach: a 1-process world gets MPI_ERR_WIN (then writes are emulated)
            rma = e.getMessage();
        }
        this.rmaFailure = rma;
        String server = System.getenv("OMPI_MCA_pmix_server_uri");
        this.links = new MpiLinks(this, envelopeComm, dataComm, singleton && worldSize == 1 && server != null
                && !server.isBlank());
        Thread hook = new Thread(MpiRuntime::shutdown, "kvtransfer-mpi-finalize");
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /** Rank 0 draws a random id for this MPI world; everyone takes it (blocking: init is collective anyway). */
    private static String agreeWorldId(int comm) {
        long mine = new java.security.SecureRandom().nextLong();
        long handle = MpiNative.allgatherStart(comm, new long[] {mine});
        while (MpiNative.allgatherProgress(handle) == 0) {
            LockSupport.parkNanos(50_000);
        }
        long id = MpiNative.allgatherResult(handle)[0][0];
        return String.format("%08x", id & 0xffff_ffffL);
    }

    /**
     * Initializes MPI on first use (collective over {@code MPI_COMM_WORLD}: every rank of the job must get here).
     * A process that only inherited a rank's environment from its parent (a child JVM of a rank, not launched by
     * {@code mpirun}) initializes as a singleton instead of claiming the parent's rank
     * ({@link #detachedFromParentRank()}).
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
        rt.stopAgent();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (rt.active.get() > 0 && System.nanoTime() - deadline < 0) {
            LockSupport.parkNanos(100_000);
        }
        if (rt.active.get() > 0) {
            System.err.println("kvtransfer-mpi: " + rt.active.get() + " call(s) still inside MPI after 5 s;"
                    + " not finalizing (MPI would fail under them)");
            return;
        }
        rt.releaseEagerSends();
        if (rt.links.port() != null) {
            // The native acceptor is blocked in MPI_Comm_accept, which cannot be cancelled; MPI_Finalize would
            // wait for it forever. The process is exiting: its MPI state goes with it.
            return;
        }
        if (rt.rmaFailure == null) {
            MpiNative.rmaFree(); // collective, like finalize
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

    /**
     * @return true when this process was not launched as an MPI rank but inherited a rank's environment from its
     *         parent, and therefore initialized as a singleton (world size 1) of its own
     */
    public boolean detachedFromParentRank() {
        return detachedFromParentRank;
    }

    /**
     * @return 8 hex digits naming this MPI world (drawn by rank 0 at init): the {@code @...} part of every
     *         address, so an address of another {@code mpirun} job (or of a singleton) is never taken for one of
     *         ours
     */
    public String worldId() {
        return worldId;
    }

    /** @return the counters of this process's transport (name → value), for diagnostics */
    public Map<String, Long> counterValues() {
        Map<String, Long> out = new LinkedHashMap<>();
        CountersReader r = counters.manager;
        r.forEach((id, type, key, label) -> out.put(label, r.getCounterValue(id)));
        return out;
    }

    Counters counters() {
        return counters;
    }

    /**
     * The address of an endpoint of this world as this process prints it: short ({@code "3"} for endpoint 0,
     * {@code "3/2"}) in a job {@code mpirun} started, where every process shares the world; qualified
     * ({@code "0/1@world~port"}) in a process {@code mpirun} did not start, whose world nobody else shares.
     */
    String address(int rank, int endpoint) {
        if (qualifiedAddresses) {
            return MpiAddress.format(rank, endpoint, worldId, links.port());
        }
        return endpoint == 0 ? Integer.toString(rank) : rank + "/" + endpoint;
    }

    /** @return why the process's RMA window could not be created, or null when native one-sided writes work */
    String rmaFailure() {
        return rmaFailure;
    }

    /** @return the next endpoint id this process would open (ids below it were issued) */
    int issuedEndpoints() {
        return nextEndpoint;
    }

    /** @return the process's links (link 0 = its own world) */
    MpiLinks links() {
        return links;
    }

    int groupSetupComm() {
        return groupSetupComm;
    }

    int envelopeComm() {
        return envelopeComm;
    }

    int dataComm() {
        return dataComm;
    }

    /** @return a payload MPI tag not in flight from this rank (a sequence mod {@code TAG_UB + 1}) */
    int nextPayloadTag() {
        int n = payloadTags.getAndIncrement() & Integer.MAX_VALUE;
        return tagUpperBound == Integer.MAX_VALUE ? n : n % (tagUpperBound + 1);
    }

    // ------------------------------------------------------------------ endpoints and the agent

    /** Opens an endpoint for a manager (local, not collective); starts the agent with the first one. */
    MpiEndpoint openEndpoint(MpiConnectionManager manager, MpiSettings settings) {
        synchronized (endpointLock) {
            if (finalizing) {
                throw new TransportException(ErrorCode.NETWORK, "MPI is finalizing in this process");
            }
            if (nextEndpoint > tagUpperBound) {
                throw new TransportException(ErrorCode.NETWORK, "this process opened " + nextEndpoint
                        + " endpoints: MPI_TAG_UB (" + tagUpperBound + ") bounds endpoint ids");
            }
            int id = nextEndpoint++;
            MpiEndpoint e = new MpiEndpoint(id, manager, settings.maxQueuedBytes(), settings.maxQueuedMessages());
            MpiEndpoint[] a = endpoints;
            if (id >= a.length) {
                a = java.util.Arrays.copyOf(a, Math.max(a.length * 2, id + 1));
            } else {
                a = a.clone();
            }
            a[id] = e;
            endpoints = a;
            openEndpoints++;
            users.add(manager);
            if (agentRunner == null) {
                startAgent();
            }
            return e;
        }
    }

    /** Closes an endpoint; stops the agent (and waits for its thread) after the last one. */
    void closeEndpoint(MpiConnectionManager manager, int id) {
        synchronized (endpointLock) {
            MpiEndpoint[] a = endpoints;
            if (id < a.length && a[id] != null && a[id].owner == manager) {
                a = a.clone();
                a[id] = null;
                endpoints = a;
                openEndpoints--;
            }
            users.remove(manager);
            if (openEndpoints == 0) {
                stopAgent();
            }
        }
    }

    /** @return the open endpoint with this id, or null */
    MpiEndpoint endpoint(int id) {
        MpiEndpoint[] a = endpoints;
        return id >= 0 && id < a.length ? a[id] : null;
    }

    private void startAgent() {
        MpiProgressAgent agent = new MpiProgressAgent(this);
        agentRunner = new AgentRunner(new MpiProgressAgent.Idle(this), e -> {
            counters.agentErrors.increment();
            report("agent", e);
        }, null, agent);
        Thread t = AgentRunner.startOnThread(agentRunner, r -> {
            Thread th = new Thread(r, "kvtransfer-mpi-progress");
            th.setDaemon(true);
            return th;
        });
        agentThread = t;
    }

    private void stopAgent() {
        AgentRunner r;
        synchronized (endpointLock) {
            r = agentRunner;
            agentRunner = null;
            agentThread = null;
        }
        if (r != null) {
            r.close();
            releaseEagerSends();
        }
    }

    /** @return receives parked waiting for an envelope now */
    int waitingReceives() {
        return waitingReceives.get();
    }

    void receiveWaiting(boolean starts) {
        if (starts) {
            waitingReceives.incrementAndGet();
            Thread t = agentThread;
            if (t != null) {
                LockSupport.unpark(t);
            }
        } else {
            waitingReceives.decrementAndGet();
        }
    }

    /** @return whether the agent is running (false after it stopped on its own error) */
    boolean agentRunning() {
        AgentRunner r = agentRunner;
        return r != null && !r.isClosed();
    }

    // ------------------------------------------------------------------ eager sends in flight

    /** Hands an eager send that did not complete at once to the agent, which completes it. */
    void deferEager(long request, MpiConnectionManager owner) {
        synchronized (eagerLock) {
            if (eagerCount == eagerPending.length) {
                eagerPending = java.util.Arrays.copyOf(eagerPending, eagerCount * 2);
                eagerOwners = java.util.Arrays.copyOf(eagerOwners, eagerCount * 2);
            }
            eagerPending[eagerCount] = request;
            eagerOwners[eagerCount] = owner;
            eagerCount++;
        }
        counters.eagerDeferred.increment();
    }

    /** @return eager sends completed now (called by the agent) */
    int reapEagerSends() {
        int done = 0;
        synchronized (eagerLock) {
            int kept = 0;
            for (int i = 0; i < eagerCount; i++) {
                long request = eagerPending[i];
                MpiConnectionManager owner = eagerOwners[i];
                boolean complete;
                try {
                    complete = MpiNative.test(request, 0) != 0;
                } catch (MpiNative.MpiCallException e) {
                    complete = true; // the request is gone
                    TransportException t = new TransportException(ErrorCode.NETWORK, (owner == null ? "mpi agent"
                            : owner.toString()) + ": an eager send failed after it returned: " + e.getMessage(), e);
                    if (owner != null) {
                        owner.backgroundError(t);
                    } else {
                        report("eager", t);
                    }
                }
                if (complete) {
                    done++;
                } else {
                    eagerPending[kept] = request;
                    eagerOwners[kept] = owner;
                    kept++;
                }
            }
            for (int i = kept; i < eagerCount; i++) {
                eagerOwners[i] = null;
            }
            eagerCount = kept;
        }
        return done;
    }

    /** Releases the eager sends still in flight to MPI (they were handed over: not cancelled). */
    private void releaseEagerSends() {
        synchronized (eagerLock) {
            for (int i = 0; i < eagerCount; i++) {
                MpiNative.requestFree(eagerPending[i]);
                eagerOwners[i] = null;
            }
            eagerCount = 0;
        }
    }

    // ------------------------------------------------------------------ errors

    /**
     * Reports a background error that concerns every open endpoint (to each one's handler), at most once per
     * second per kind; suppressed repeats are counted and named in the next report.
     */
    void report(String kind, Throwable error) {
        Throwable e = rateLimited(kind, error);
        if (e == null) {
            return;
        }
        for (MpiEndpoint m : endpoints) {
            if (m != null) {
                m.owner.backgroundError(e);
            }
        }
    }

    /** Like {@link #report} for one endpoint's handler. */
    void reportTo(int endpoint, String kind, Throwable error) {
        MpiEndpoint m = endpoint(endpoint);
        Throwable e = rateLimited(endpoint + "-" + kind, error);
        if (m != null && e != null) {
            m.owner.backgroundError(e);
        }
    }

    private Throwable rateLimited(String kind, Throwable error) {
        long now = System.nanoTime();
        long[] last = lastReports.computeIfAbsent(kind, k -> new long[] {now - REPORT_INTERVAL_NANOS, 0});
        synchronized (last) {
            if (now - last[0] < REPORT_INTERVAL_NANOS) {
                last[1]++;
                return null;
            }
            long suppressed = last[1];
            last[0] = now;
            last[1] = 0;
            if (suppressed == 0) {
                return error;
            }
            TransportException t = new TransportException(error instanceof TransportException te ? te.code()
                    : ErrorCode.INTERNAL, error.getMessage() + " (and " + suppressed + " more like it in the last"
                    + " second)", error);
            return t;
        }
    }

    // ------------------------------------------------------------------ finalize bookkeeping

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

    /** The process's transport counters (Agrona counters over a private buffer). */
    static final class Counters {
        final ConcurrentCountersManager manager = new ConcurrentCountersManager(
                new UnsafeBuffer(ByteBuffer.allocateDirect(64 * CountersReader.METADATA_LENGTH)),
                new UnsafeBuffer(ByteBuffer.allocateDirect(64 * CountersReader.COUNTER_LENGTH)));
        final AtomicCounter envelopes = manager.newCounter("mpi envelopes received");
        final AtomicCounter dropped = manager.newCounter("mpi messages dropped (closed endpoint or queue bound)");
        final AtomicCounter malformed = manager.newCounter("mpi malformed envelopes");
        final AtomicCounter eagerDeferred = manager.newCounter("mpi eager sends completed by the agent");
        final AtomicCounter agentErrors = manager.newCounter("mpi progress agent errors");
        final AtomicCounter backgroundErrors = manager.newCounter("mpi background errors reported");
        final AtomicCounter rmaWrites = manager.newCounter("mpi one-sided batches written");
        final AtomicCounter rmaRefused = manager.newCounter("mpi one-sided batches refused");
    }
}
