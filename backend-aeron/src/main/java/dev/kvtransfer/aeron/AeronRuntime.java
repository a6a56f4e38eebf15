package dev.kvtransfer.aeron;

import io.aeron.Aeron;
import io.aeron.CncFileDescriptor;
import io.aeron.status.PublicationErrorFrame;
import org.agrona.CloseHelper;
import org.agrona.IoUtil;
import org.agrona.concurrent.AgentInvoker;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;
import org.agrona.concurrent.status.ConcurrentCountersManager;

import java.io.File;
import java.lang.System.Logger.Level;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * What the managers of one process share for one media driver, reference-counted: the driver (embedded, or the
 * directory of an external one), one Aeron client whose conductor runs on our agent thread (no client thread),
 * the agent threads ({@link AgentGroup}s under {@link AgentRunner}s, {@code aeron.agents}, default one), the
 * counters, and the driver's identity (which travels in addresses so peers on the same driver talk IPC). One
 * runtime per process and driver is Aeron's own advice, and what keeps first contact between many ranks of one
 * process cheap: one client, one conductor, one agent thread, however many ranks.
 *
 * <p>When the client closes under us (a stall longer than the driver timeout: SIGSTOP, a long GC pause), the
 * first agent that notices calls {@link #recover}: a fresh client on the same driver, a new generation; every
 * manager then re-subscribes on its own address and serves again.
 */
final class AeronRuntime {
    private static final System.Logger LOG = System.getLogger(AeronRuntime.class.getName());
    private static final Map<String, AeronRuntime> RUNTIMES = new HashMap<>();
    private static final int MAX_COUNTERS = 4096;

    private final String key;
    private final AeronSettings settings;
    private final EmbeddedDriver.Lease driver;
    private final String directory;
    private final String driverId;
    private final AgentGroup[] groups;
    private final AgentRunner[] runners;
    private final ConcurrentCountersManager counters;
    private final List<TransportAgent> members = new CopyOnWriteArrayList<>();
    private volatile Aeron client;
    private volatile int generation;
    private int refs;
    private int nextGroup;

    private AeronRuntime(String key, AeronSettings settings) {
        this.key = key;
        this.settings = settings;
        EmbeddedDriver.Lease d = null;
        try {
            d = settings.externalDir == null ? EmbeddedDriver.acquire(settings) : null;
            this.driver = d;
            this.directory = d != null ? d.directory() : settings.externalDir;
            this.client = connect();
            this.driverId = readDriverId(directory);
        } catch (RuntimeException | Error e) {
            CloseHelper.quietClose(client);
            CloseHelper.quietClose(d);
            throw e;
        }
        int metaBytes = MAX_COUNTERS * 512;
        int valueBytes = MAX_COUNTERS * 128;
        this.counters = new ConcurrentCountersManager(new UnsafeBuffer(ByteBuffer.allocateDirect(metaBytes)),
                new UnsafeBuffer(ByteBuffer.allocateDirect(valueBytes)));
        this.groups = new AgentGroup[settings.agents];
        this.runners = new AgentRunner[settings.agents];
        for (int i = 0; i < groups.length; i++) {
            Doorbell bell = settings.doorbell ? Doorbell.open(directory) : null;
            groups[i] = new AgentGroup("kvtransfer-aeron-agent-" + i, this, i == 0, bell);
            AtomicCounter errors = counters.newCounter("aeron agent " + i + " errors");
            runners[i] = new AgentRunner(settings.newAgentIdleStrategy(bell, groups[i]::readsRemoteStreams),
                    this::onRunnerError, errors, groups[i]);
            Thread t = AgentRunner.startOnThread(runners[i], r -> {
                Thread th = new Thread(r);
                th.setDaemon(true);
                return th;
            });
            groups[i].thread = t;
        }
    }

    private Aeron connect() {
        return Aeron.connect(new Aeron.Context()
                .aeronDirectoryName(directory)
                .clientName("kvtransfer-" + ProcessHandle.current().pid())
                .useConductorAgentInvoker(true)
                .driverTimeoutMs(TimeUnit.NANOSECONDS.toMillis(settings.clientTimeoutNs))
                .errorHandler(this::onClientError)
                .subscriberErrorHandler(this::onClientError)
                .publicationErrorFrameHandler(this::onPublicationError));
    }

    /**
     * A peer's driver rejected one of our publications (its manager refused our stream: {@code Image.reject}, see
     * {@link TransportAgent#refuse}): the manager that owns the publication fails that peer with the refusal's
     * code, so a caller with a wrong secret learns UNAUTHORIZED at once instead of waiting for a TIMEOUT. Client
     * conductor thread: the frame is reused, so only its registration id and text are handed on.
     */
    private void onPublicationError(PublicationErrorFrame frame) {
        long registrationId = frame.registrationId();
        String message = String.valueOf(frame.errorMessage());
        for (TransportAgent a : members) {
            a.onPublicationRejected(registrationId, message);
        }
    }

    /**
     * The driver's identity: its process id and start time from its CnC file, and its directory. Managers on
     * drivers with the same identity talk IPC.
     */
    private static String readDriverId(String dir) {
        File cnc = new File(dir, CncFileDescriptor.CNC_FILE);
        MappedByteBuffer mapped = IoUtil.mapExistingFile(cnc, "cnc");
        try {
            UnsafeBuffer meta = CncFileDescriptor.createMetaDataBuffer(mapped);
            int version = meta.getIntVolatile(CncFileDescriptor.cncVersionOffset(0));
            CncFileDescriptor.checkVersion(version);
            long pid = CncFileDescriptor.pid(meta);
            long start = CncFileDescriptor.startTimestampMs(meta);
            int dirHash = new File(dir).getAbsolutePath().hashCode();
            return Long.toHexString(pid) + "-" + Long.toHexString(start) + "-" + Integer.toHexString(dirHash);
        } finally {
            IoUtil.unmap(mapped);
        }
    }

    /**
     * Takes a reference on the runtime for these settings, creating it when none exists.
     *
     * @param settings the manager's settings
     * @return the runtime; release it once
     */
    static AeronRuntime acquire(AeronSettings settings) {
        synchronized (RUNTIMES) {
            String k = settings.runtimeKey();
            AeronRuntime r = RUNTIMES.get(k);
            if (r == null) {
                r = new AeronRuntime(k, settings);
                RUNTIMES.put(k, r);
            }
            r.refs++;
            return r;
        }
    }

    /** @return how many runtimes this process runs (tests check that close released them) */
    static int running() {
        synchronized (RUNTIMES) {
            return RUNTIMES.size();
        }
    }

    /**
     * The media driver's own counters (system counters: cycle times, errors, loss, NAKs, ...) of every runtime of
     * this process, non-zero ones only; for diagnosis and benchmarks.
     *
     * @return one line per counter
     */
    static List<String> driverCounters() {
        List<AeronRuntime> rs;
        synchronized (RUNTIMES) {
            rs = List.copyOf(RUNTIMES.values());
        }
        List<String> out = new java.util.ArrayList<>();
        for (AeronRuntime r : rs) {
            Aeron c = r.client;
            if (c.isClosed()) {
                continue;
            }
            Map<String, Integer> kinds = new java.util.TreeMap<>();
            c.countersReader().forEach((value, id, label) -> {
                if (value != 0 && id < 64) {
                    out.add(r.directory + ": " + label + " = " + value);
                }
                int colon = label.indexOf(':');
                kinds.merge(colon > 0 ? label.substring(0, colon) : label, 1, Integer::sum);
            });
            out.add(r.directory + ": counters by kind " + kinds);
        }
        return out;
    }

    /** Drops a reference; the last one stops the agents, closes the client and releases the driver. */
    void release() {
        synchronized (RUNTIMES) {
            if (--refs > 0) {
                return;
            }
            RUNTIMES.remove(key);
        }
        for (AgentRunner r : runners) {
            CloseHelper.quietClose(r); // stops the thread; the group's onClose runs on it
        }
        for (AgentGroup g : groups) {
            CloseHelper.quietClose(g.doorbell());
        }
        CloseHelper.quietClose(client);
        CloseHelper.quietClose(driver);
    }

    /** Assigns a manager's agent to a group (round robin) and starts running it. */
    AgentGroup join(TransportAgent agent) {
        AgentGroup g;
        synchronized (RUNTIMES) {
            g = groups[nextGroup++ % groups.length];
        }
        members.add(agent);
        g.join(agent);
        return g;
    }

    void leave(TransportAgent agent) {
        members.remove(agent);
    }

    /** Runs the client's conductor duty cycle (group 0's thread). */
    int invokeClient() {
        Aeron c = client;
        AgentInvoker invoker = c.conductorAgentInvoker();
        return invoker == null ? 0 : invoker.invoke();
    }

    Aeron client() {
        return client;
    }

    int generation() {
        return generation;
    }

    String directory() {
        return directory;
    }

    /** @return the embedded driver's error log, or null on an external driver (its errors are its process's) */
    DriverErrorLog driverErrors() {
        return driver == null ? null : driver.errors();
    }

    String driverId() {
        return driverId;
    }

    ConcurrentCountersManager counters() {
        return counters;
    }

    /**
     * Replaces a closed client (once per generation: later callers see the new one). Blocking: called by an agent
     * that found the client closed, which is the rare path after a stall.
     *
     * @param seen the generation the caller was using
     * @return true when a client of a newer generation is available
     */
    synchronized boolean recover(int seen) {
        if (generation != seen) {
            return true;
        }
        Aeron old = client;
        if (!old.isClosed()) {
            return false;
        }
        try {
            client = connect();
            generation++;
            LOG.log(Level.WARNING, "aeron: the client of " + directory + " had closed (a stall longer than the"
                    + " driver timeout?); reconnected, generation " + generation);
            CloseHelper.quietClose(old);
            return true;
        } catch (RuntimeException e) {
            for (TransportAgent a : members) {
                a.reportError(new IllegalStateException("aeron: cannot reconnect to the media driver in "
                        + directory + " after the client closed: " + e, e));
            }
            return false;
        }
    }

    private void onClientError(Throwable t) {
        List<TransportAgent> m = members;
        if (m.isEmpty()) {
            LOG.log(Level.WARNING, "aeron client error in " + directory, t);
        }
        for (TransportAgent a : m) {
            a.reportError(t);
        }
    }

    private void onRunnerError(Throwable t) {
        onClientError(t);
    }
}
