package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import io.aeron.driver.ThreadingMode;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.BusySpinIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.SleepingMillisIdleStrategy;
import org.agrona.concurrent.YieldingIdleStrategy;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * Every {@code aeron.*} property of this transport, read once from a {@link TransportConfig} and validated once
 * (as Aeron's {@code Context.conclude()}): unknown {@code aeron.*} keys are refused, every error names the key and
 * the value. Names and defaults live here and nowhere else; the README documents them.
 */
public final class AeronSettings {
    /** The prefix of this transport's properties. */
    public static final String PREFIX = "aeron.";
    /** Directory of an external, already running media driver (e.g. the host support's); none embedded then. */
    public static final String DIR = "aeron.dir";
    /** Idle strategy of our agents and the embedded driver: backoff, agrona-backoff, sleeping, yielding, busyspin. */
    public static final String IDLE = "aeron.idle";
    /** Embedded driver threading mode: shared, shared_network, dedicated. */
    public static final String THREADING = "aeron.threading";
    /** Term buffer length of each publication (power of two, 1 MiB .. 1 GiB). */
    public static final String TERM_LENGTH = "aeron.termLength";
    /** UDP datagram size (multiple of 32, 4096 .. 65504). */
    public static final String MTU = "aeron.mtu";
    /** Bytes per data chunk of a rendezvous message (one Aeron message each). */
    public static final String CHUNK = "aeron.chunk";
    /** Socket buffers in bytes (clamped to the OS maximum); the receiver window is half of it. */
    public static final String SOCKET_BUFFER = "aeron.socketBuffer";
    /** Silence (no data, heartbeat or status message) after which a connected peer is lost. */
    public static final String PEER_TIMEOUT_MS = "aeron.peerTimeoutMs";
    /** How long a peer that was never reached may take to answer its first connection before it is lost. */
    public static final String CONNECT_TIMEOUT_MS = "aeron.connectTimeoutMs";
    /** Driver-client liveness: client-side driver timeout and, embedded, the driver's client timeout. */
    public static final String CLIENT_TIMEOUT_MS = "aeron.clientTimeoutMs";
    /** Bound on the bytes of messages held before their receive is posted (per manager). */
    public static final String EARLY_BUFFER_BYTES = "aeron.earlyBufferBytes";
    /** Bound on the number of messages (eager of any length, rendezvous announcements) held before their receive. */
    public static final String EARLY_MESSAGES = "aeron.earlyMessages";
    /** Largest message sent eagerly (without rendezvous); at least {@link Connection#EAGER_LIMIT}. */
    public static final String EAGER_LIMIT = "aeron.eagerLimit";
    /** Whether peers on the same media driver talk over {@code aeron:ipc} (true/false). */
    public static final String IPC = "aeron.ipc";
    /**
     * Whether one-sided writes between processes of one host copy straight into the owner's pool when it lies in a
     * shared file and the managers authenticate each other (true/false, default true); false keeps them emulated.
     */
    public static final String SHARED_MEMORY_WRITES = "aeron.sharedMemoryWrites";
    /** Agent threads per media driver in this process (all managers on that driver share them). */
    public static final String AGENTS = "aeron.agents";
    /** A stream (image) that has not completed its handshake in this time is refused and no longer read. */
    public static final String HANDSHAKE_TIMEOUT_MS = "aeron.handshakeTimeoutMs";
    /** Bound on the streams (images) a manager keeps state for; beyond it new streams are ignored. */
    public static final String MAX_IMAGES = "aeron.maxImages";
    /**
     * Bound on the streams awaiting their HELLO: a new one beyond it evicts (rejects) the oldest, so a flood of
     * streams that never greet (forged SETUPs) cannot keep a genuine peer, which greets at once, out.
     */
    public static final String MAX_PENDING_HANDSHAKES = "aeron.maxPendingHandshakes";
    /** Bound on the streams awaiting their HELLO from one source ({@code ip:port}); beyond it new ones are rejected. */
    public static final String MAX_PENDING_PER_SOURCE = "aeron.maxPendingPerSource";
    /** How far an authenticated HELLO's timestamp may be from the receiver's clock. */
    public static final String AUTH_WINDOW_MS = "aeron.authWindowMs";
    /** How long an agent (and the embedded driver) keeps spinning after work before it parks (µs). */
    public static final String SPIN_MICROS = "aeron.spinMicros";
    /** How long a blocked caller spins before it parks (µs); 0 on a small host, where spinning callers starve the agents. */
    public static final String CALLER_SPIN_MICROS = "aeron.callerSpinMicros";
    /**
     * How long a blocked caller runs its manager's duty cycle itself (polls the streams, completes its own receive)
     * while no work turns up, before it hands back to the agent thread and parks (µs); 0: never, the agent alone
     * polls. Only one thread runs a manager's duty cycle at a time (a try-lock), whichever it is.
     */
    public static final String CALLER_POLL_MICROS = "aeron.callerPollMicros";
    /**
     * Congestion control of the UDP streams this manager receives: {@code cubic} (default: Aeron's CUBIC, the
     * subscription channel's {@code cc=cubic}; the window shrinks on loss, so a bottleneck whose queue is smaller
     * than the receiver window does not turn into a NAK storm) or {@code static} (Aeron's own default: the full
     * receiver window is always open). IPC streams have no congestion control.
     */
    public static final String CONGESTION_CONTROL = "aeron.congestionControl";
    /**
     * The deployment group that may use the host's shared media driver ({@code AeronHostSupport}): its directory,
     * cnc.dat and log buffers become group read-write ({@code 02750} parent, umask {@code 007}). Unset (default):
     * owner-only ({@code 0700} parent, umask {@code 077}). An embedded driver is always owner-only.
     */
    public static final String DIR_GROUP = "aeron.dirGroup";
    /**
     * Whether an idle agent sleeps on a doorbell that a peer of this host rings after it offers a message
     * ({@link Doorbell}; default true): the first hop after a quiet spell then does not wait for the end of the
     * agent's park (up to 1 ms). Only with the {@code backoff} idle strategy and IPC.
     */
    public static final String DOORBELL = "aeron.doorbell";

    /** Every property this transport reads; any other {@code aeron.*} key is refused at create. */
    public static final Set<String> KNOWN = Set.of(DIR, IDLE, THREADING, TERM_LENGTH, MTU, CHUNK, SOCKET_BUFFER,
            PEER_TIMEOUT_MS, CONNECT_TIMEOUT_MS, CLIENT_TIMEOUT_MS, EARLY_BUFFER_BYTES, EARLY_MESSAGES, EAGER_LIMIT,
            IPC, AGENTS, HANDSHAKE_TIMEOUT_MS, MAX_IMAGES, AUTH_WINDOW_MS, SPIN_MICROS, CALLER_SPIN_MICROS,
            CALLER_POLL_MICROS, CONGESTION_CONTROL, DIR_GROUP, MAX_PENDING_HANDSHAKES, MAX_PENDING_PER_SOURCE,
            SHARED_MEMORY_WRITES, DOORBELL);

    static final long DEFAULT_TERM_LENGTH = 16L << 20;
    static final long DEFAULT_MTU = 32768;
    /** Smallest {@code aeron.mtu}: Aeron's default, a datagram that fits a 1500-byte Ethernet frame. */
    static final long MIN_MTU = 1408;
    static final long DEFAULT_CHUNK = 1L << 20;
    static final long DEFAULT_SOCKET_BUFFER = 4L << 20;
    static final long DEFAULT_PEER_TIMEOUT_MS = 3000;
    static final long DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
    static final long DEFAULT_CLIENT_TIMEOUT_MS = 10_000;
    static final long DEFAULT_EARLY_BUFFER_BYTES = 64L << 20;
    static final long DEFAULT_EARLY_MESSAGES = 65_536;
    static final long DEFAULT_HANDSHAKE_TIMEOUT_MS = 5000;
    static final long DEFAULT_MAX_IMAGES = 4096;
    static final long DEFAULT_AUTH_WINDOW_MS = 120_000;
    static final long DEFAULT_MAX_PENDING_HANDSHAKES = 1024;
    static final long DEFAULT_MAX_PENDING_PER_SOURCE = 256;
    static final long DEFAULT_SPIN_MICROS = 100;
    static final long DEFAULT_CALLER_POLL_MICROS = 100;
    static final String DEFAULT_CONGESTION_CONTROL = "cubic";

    /** The stream id every manager's UDP subscription listens on. */
    static final int STREAM_ID = 0x4B56;
    static final String IPC_CHANNEL = "aeron:ipc";
    /** Bytes an early message costs against {@code aeron.earlyBufferBytes} beyond its payload (its bookkeeping). */
    static final int ARRIVAL_OVERHEAD = 64;
    /** Longest address (UTF-8 bytes) a peer may claim; longer HELLOs are refused. */
    static final int MAX_ADDRESS_BYTES = 256;

    final String externalDir;
    final String idle;
    final ThreadingMode threading;
    final int termLength;
    final int mtu;
    final int chunk;
    final int socketBuffer;
    final long peerTimeoutNs;
    final long connectTimeoutNs;
    final long clientTimeoutNs;
    final long earlyBufferBytes;
    final long earlyMessages;
    final int eagerLimit;
    final boolean ipc;
    /** One-copy writes through shared pool files with peers of this host. */
    final boolean sharedMemoryWrites;
    final int agents;
    final long handshakeTimeoutNs;
    final int maxImages;
    final int maxPendingHandshakes;
    final int maxPendingPerSource;
    final long authWindowMs;
    final long spinNs;
    final long callerSpinNs;
    final long callerPollNs;
    /** {@code static} or {@code cubic}: the {@code cc} parameter of the UDP subscription channel. */
    final String congestionControl;
    /** The group that may use the shared driver, or null (owner-only). */
    final String dirGroup;
    /** Agents sleep on a {@link Doorbell} that peers of this host ring (backoff idle strategy, IPC on). */
    final boolean doorbell;

    private AeronSettings(TransportConfig config) {
        config.checkKnownProperties(PREFIX, KNOWN);
        String dir = config.property(DIR, "").trim();
        this.externalDir = dir.isEmpty() ? null : dir;
        this.idle = config.property(IDLE, "backoff").trim().toLowerCase(Locale.ROOT);
        this.spinNs = TimeUnit.MICROSECONDS.toNanos(range(config, SPIN_MICROS, DEFAULT_SPIN_MICROS, 0, 100_000));
        this.callerSpinNs = TimeUnit.MICROSECONDS.toNanos(range(config, CALLER_SPIN_MICROS, 0, 0, 100_000));
        this.callerPollNs = TimeUnit.MICROSECONDS.toNanos(range(config, CALLER_POLL_MICROS,
                DEFAULT_CALLER_POLL_MICROS, 0, 100_000));
        this.congestionControl = config.property(CONGESTION_CONTROL, DEFAULT_CONGESTION_CONTROL).trim()
                .toLowerCase(Locale.ROOT);
        if (!congestionControl.equals("static") && !congestionControl.equals("cubic")) {
            throw new IllegalArgumentException("transport property " + CONGESTION_CONTROL + " = '"
                    + config.property(CONGESTION_CONTROL, "") + "': must be static or cubic");
        }
        newIdleStrategy(idle, spinNs); // validates
        String tm = config.property(THREADING, "shared").trim().toUpperCase(Locale.ROOT);
        try {
            this.threading = ThreadingMode.valueOf(tm);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("transport property " + THREADING + " = '" + tm
                    + "': must be shared, shared_network or dedicated");
        }
        long term = config.longProperty(TERM_LENGTH, DEFAULT_TERM_LENGTH);
        if (term < (1 << 20) || term > (1 << 30) || Long.bitCount(term) != 1) {
            throw new IllegalArgumentException("transport property " + TERM_LENGTH + " = " + term
                    + ": must be a power of two in [1048576, 1073741824] (a term of 1 MiB carries the 64 KiB eager"
                    + " messages whole)");
        }
        this.termLength = (int) term;
        long m = config.longProperty(MTU, DEFAULT_MTU);
        // From Aeron's own default (1408: one datagram per Ethernet frame, no IP fragmentation) to its maximum.
        if (m < MIN_MTU || m > 65504 || m % 32 != 0) {
            throw new IllegalArgumentException("transport property " + MTU + " = " + m
                    + ": must be a multiple of 32 in [" + MIN_MTU + ", 65504]");
        }
        this.mtu = (int) m;
        long maxBody = maxMessageLength(termLength) - Wire.HEADER_LENGTH;
        long c = config.longProperty(CHUNK, Math.min(DEFAULT_CHUNK, maxBody));
        if (c < 1024 || c > maxBody) {
            throw new IllegalArgumentException("transport property " + CHUNK + " = " + c + ": must be in [1024, "
                    + maxBody + "] (the largest Aeron message of term length " + termLength + ", less our header)");
        }
        this.chunk = (int) c;
        long el = config.longProperty(EAGER_LIMIT, Connection.EAGER_LIMIT);
        if (el < Connection.EAGER_LIMIT || el > Math.min(maxBody, 1 << 20)) {
            throw new IllegalArgumentException("transport property " + EAGER_LIMIT + " = " + el + ": must be in ["
                    + Connection.EAGER_LIMIT + ", " + Math.min(maxBody, 1 << 20) + "] (the contract's eager limit .."
                    + " the largest Aeron message of term length " + termLength + ", at most 1 MiB)");
        }
        this.eagerLimit = (int) el;
        long sb = config.longProperty(SOCKET_BUFFER, DEFAULT_SOCKET_BUFFER);
        if (sb < 65536 || sb > (1 << 30)) {
            throw new IllegalArgumentException("transport property " + SOCKET_BUFFER + " = " + sb
                    + ": must be in [65536, 1073741824]");
        }
        // Asking for more than the kernel allows only makes Aeron warn; a window beyond the socket buffer drops
        // datagrams on loopback. The window must also stay within half a term.
        long osMax = Math.min(readProcLong("/proc/sys/net/core/rmem_max"), readProcLong("/proc/sys/net/core/wmem_max"));
        this.socketBuffer = (int) Math.max(65536, Math.min(Math.min(sb, osMax), termLength / 2));
        this.peerTimeoutNs = TimeUnit.MILLISECONDS.toNanos(range(config, PEER_TIMEOUT_MS, DEFAULT_PEER_TIMEOUT_MS,
                500, 600_000));
        this.connectTimeoutNs = TimeUnit.MILLISECONDS.toNanos(range(config, CONNECT_TIMEOUT_MS,
                Math.max(DEFAULT_CONNECT_TIMEOUT_MS, TimeUnit.NANOSECONDS.toMillis(peerTimeoutNs) + 2000), 500, 600_000));
        this.clientTimeoutNs = TimeUnit.MILLISECONDS.toNanos(range(config, CLIENT_TIMEOUT_MS, DEFAULT_CLIENT_TIMEOUT_MS,
                1000, 3_600_000));
        this.earlyBufferBytes = range(config, EARLY_BUFFER_BYTES, DEFAULT_EARLY_BUFFER_BYTES, 0, 1L << 40);
        this.earlyMessages = range(config, EARLY_MESSAGES, DEFAULT_EARLY_MESSAGES, 16, 1L << 24);
        this.ipc = flag(config, IPC, true);
        this.sharedMemoryWrites = flag(config, SHARED_MEMORY_WRITES, true);
        this.doorbell = flag(config, DOORBELL, true) && ipc && idle.equals("backoff");
        this.agents = (int) range(config, AGENTS, 1, 1, 64);
        this.handshakeTimeoutNs = TimeUnit.MILLISECONDS.toNanos(range(config, HANDSHAKE_TIMEOUT_MS,
                DEFAULT_HANDSHAKE_TIMEOUT_MS, 100, 600_000));
        this.maxImages = (int) range(config, MAX_IMAGES, DEFAULT_MAX_IMAGES, 16, 1 << 20);
        this.maxPendingHandshakes = (int) range(config, MAX_PENDING_HANDSHAKES, Math.min(DEFAULT_MAX_PENDING_HANDSHAKES,
                maxImages / 2), 8, maxImages);
        this.maxPendingPerSource = (int) range(config, MAX_PENDING_PER_SOURCE, Math.min(DEFAULT_MAX_PENDING_PER_SOURCE,
                maxPendingHandshakes), 1, maxPendingHandshakes);
        this.authWindowMs = range(config, AUTH_WINDOW_MS, DEFAULT_AUTH_WINDOW_MS, 1000, 86_400_000);
        String g = config.property(DIR_GROUP, "").trim();
        if (!g.isEmpty() && !g.matches("[A-Za-z0-9._][A-Za-z0-9._-]{0,31}")) {
            throw new IllegalArgumentException("transport property " + DIR_GROUP + " = '" + g + "': must be a group"
                    + " name (letters, digits, '.', '_', '-'; at most 32)");
        }
        this.dirGroup = g.isEmpty() ? null : g;
    }

    /** A {@code true} / {@code false} property (any case, trimmed). */
    private static boolean flag(TransportConfig config, String key, boolean defaultValue) {
        String v = config.property(key, Boolean.toString(defaultValue)).trim().toLowerCase(Locale.ROOT);
        if (!v.equals("true") && !v.equals("false")) {
            throw new IllegalArgumentException("transport property " + key + " = '" + config.property(key, "")
                    + "': must be true or false");
        }
        return v.equals("true");
    }

    private static long range(TransportConfig config, String key, long defaultValue, long min, long max) {
        long v = config.longProperty(key, defaultValue);
        if (v < min || v > max) {
            throw new IllegalArgumentException("transport property " + key + " = " + v + ": must be in [" + min
                    + ", " + max + "]");
        }
        return v;
    }

    /**
     * Reads and validates the Aeron properties of a config.
     *
     * @param config the transport config
     * @return the settings
     * @throws IllegalArgumentException naming the offending (or unknown) key and its value
     */
    public static AeronSettings from(TransportConfig config) {
        return new AeronSettings(Objects.requireNonNull(config, "config"));
    }

    /** Aeron's largest message for a term length: term / 8, at most 16 MiB. */
    static int maxMessageLength(int termLength) {
        return Math.min(termLength / 8, 16 << 20);
    }

    /**
     * The receiver window: half the socket receive buffer, because the kernel charges a datagram's whole
     * buffer (more than its payload) against it; a window as large as the buffer drops datagrams under load
     * and Aeron then crawls through NAKs and retransmits (measured: README).
     */
    int receiverWindow() {
        return Math.max(32 * 1024, socketBuffer / 2);
    }

    /** @return the largest message sent without rendezvous */
    public int eagerLimit() {
        return eagerLimit;
    }

    /** @return whether managers on the same driver talk IPC */
    public boolean ipc() {
        return ipc;
    }

    /** @return the external driver directory, or null when a driver is embedded */
    public String externalDir() {
        return externalDir;
    }

    /** @return a fresh idle strategy of the configured kind (idle strategies hold per-thread state) */
    IdleStrategy newIdleStrategy() {
        return newIdleStrategy(idle, spinNs);
    }

    /**
     * @return the idle strategy of an agent thread: {@link #newIdleStrategy()}, sleeping on the group's doorbell
     *         when there is one
     */
    IdleStrategy newAgentIdleStrategy(Doorbell bell, java.util.function.BooleanSupplier remoteStreams) {
        if (bell == null || !idle.equals("backoff")) {
            return newIdleStrategy();
        }
        return new SpinThenParkIdleStrategy(spinNs, TimeUnit.MILLISECONDS.toNanos(1), bell, remoteStreams);
    }

    private final ThreadLocal<IdleStrategy> callerIdle = ThreadLocal.withInitial(this::newIdleStrategy);

    /** @return this thread's idle strategy for waits on back-pressure, reset (no allocation per wait) */
    IdleStrategy callerIdleStrategy() {
        IdleStrategy s = callerIdle.get();
        s.reset();
        return s;
    }

    /**
     * The idle strategies. {@code backoff}: spin, then yield for about {@code aeron.spinMicros} after the last work
     * (so a request/response exchange keeps its agent hot between hops), then park from 1 µs doubling up to 1 ms
     * (idle CPU stays near zero).
     */
    static IdleStrategy newIdleStrategy(String name, long spinNs) {
        switch (name) {
            case "backoff":
                return new SpinThenParkIdleStrategy(spinNs, TimeUnit.MILLISECONDS.toNanos(1));
            case "agrona-backoff":
                return new BackoffIdleStrategy(10, 20, TimeUnit.MICROSECONDS.toNanos(1),
                        TimeUnit.MILLISECONDS.toNanos(1));
            case "sleeping":
                return new SleepingMillisIdleStrategy(1);
            case "yielding":
                return new YieldingIdleStrategy();
            case "busyspin":
                return new BusySpinIdleStrategy();
            default:
                throw new IllegalArgumentException("transport property " + IDLE + " = '" + name
                        + "': must be backoff, agrona-backoff, sleeping, yielding or busyspin");
        }
    }

    private static long readProcLong(String path) {
        try {
            // Files.readString trusts the size /proc reports (0) and returns a truncated value; read lines.
            return Long.parseLong(Files.readAllLines(Path.of(path)).get(0).trim());
        } catch (Exception e) {
            return Long.MAX_VALUE; // not Linux or not readable: let Aeron decide and warn
        }
    }

    /**
     * The key of the per-process runtime (driver, client, agents): managers with equal keys share it. An external
     * driver is keyed by its directory (its own settings apply), an embedded one by the settings it is built from.
     */
    String runtimeKey() {
        String agentsKey = "/agents=" + agents + "/idle=" + idle + "/spin=" + spinNs + "/doorbell=" + doorbell;
        if (externalDir != null) {
            return "dir=" + externalDir + agentsKey;
        }
        return "embedded/" + driverKey() + agentsKey;
    }

    /** The key of an embedded driver: managers whose settings give equal keys can share one driver. */
    String driverKey() {
        return threading + "/" + idle + "/" + spinNs + "/" + peerTimeoutNs + "/" + clientTimeoutNs + "/" + socketBuffer
                + "/" + mtu + "/" + termLength;
    }

    @Override
    public String toString() {
        return "AeronSettings{dir=" + (externalDir == null ? "embedded" : externalDir) + ", idle=" + idle
                + ", threading=" + threading + ", termLength=" + termLength + ", mtu=" + mtu + ", chunk=" + chunk
                + ", eagerLimit=" + eagerLimit + ", socketBuffer=" + socketBuffer + ", peerTimeoutMs="
                + TimeUnit.NANOSECONDS.toMillis(peerTimeoutNs) + ", connectTimeoutMs="
                + TimeUnit.NANOSECONDS.toMillis(connectTimeoutNs) + ", clientTimeoutMs="
                + TimeUnit.NANOSECONDS.toMillis(clientTimeoutNs) + ", earlyBufferBytes=" + earlyBufferBytes
                + ", earlyMessages=" + earlyMessages + ", ipc=" + ipc + ", agents=" + agents + ", congestionControl="
                + congestionControl + ", doorbell=" + doorbell + "}";
    }
}
