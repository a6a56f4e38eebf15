package dev.kvtransfer.aeron;

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
import java.util.concurrent.TimeUnit;

/**
 * The transport properties of the Aeron backend, read once from a {@link TransportConfig} and validated
 * (every error names the key and the value). Names and defaults live here and nowhere else; the README
 * documents them.
 */
public final class AeronSettings {
    /** An external media driver's directory; when set no driver is embedded. */
    public static final String DIR = "aeron.dir";
    /** Idle strategy of the embedded driver and of the receive agent: backoff, sleeping, yielding, busyspin. */
    public static final String IDLE = "aeron.idle";
    /** Driver threading mode: shared, shared_network, dedicated. */
    public static final String THREADING = "aeron.threading";
    /** Term buffer length of each publication (power of two, 64 KiB .. 1 GiB). */
    public static final String TERM_LENGTH = "aeron.termLength";
    /** UDP datagram size (multiple of 32, 4096 .. 65504). */
    public static final String MTU = "aeron.mtu";
    /** Bytes per data chunk of a large message (one Aeron message each). */
    public static final String CHUNK = "aeron.chunk";
    /** Socket buffers and receiver window in bytes (clamped to the OS maximum). */
    public static final String SOCKET_BUFFER = "aeron.socketBuffer";
    /** Milliseconds without a sign of life after which a peer is lost (image liveness, connection timeout). */
    public static final String PEER_TIMEOUT_MS = "aeron.peerTimeoutMs";
    /** Bound on the bytes of small messages buffered before their receive is posted (per manager). */
    public static final String EARLY_BUFFER_BYTES = "aeron.earlyBufferBytes";
    /** Whether managers of this process that share a media driver talk over {@code aeron:ipc} (true/false). */
    public static final String IPC = "aeron.ipc";

    /** Every property this transport reads; any other {@code aeron.*} key is refused at create. */
    public static final java.util.Set<String> KNOWN = java.util.Set.of(DIR, IDLE, THREADING, TERM_LENGTH, MTU, CHUNK,
            SOCKET_BUFFER, PEER_TIMEOUT_MS, EARLY_BUFFER_BYTES, IPC);
    /** The prefix of this transport's properties. */
    public static final String PREFIX = "aeron.";

    static final long DEFAULT_TERM_LENGTH = 16L << 20;
    static final long DEFAULT_MTU = 32768;
    static final long DEFAULT_CHUNK = 1L << 20;
    static final long DEFAULT_SOCKET_BUFFER = 4L << 20;
    static final long DEFAULT_PEER_TIMEOUT_MS = 3000;
    static final long DEFAULT_EARLY_BUFFER_BYTES = 64L << 20;

    /** The stream id every manager listens on (one subscription per manager). */
    static final int STREAM_ID = 0x4B56;
    /**
     * Base of the IPC stream ids: a manager's IPC subscription listens on this plus its UDP port, so the id is
     * unique on its driver even when other processes share an external driver (they cannot hold the same port).
     */
    static final int IPC_STREAM_BASE = 0x4B570000;
    static final String IPC_CHANNEL = "aeron:ipc";

    final String externalDir;
    final String idle;
    final ThreadingMode threading;
    final int termLength;
    final int mtu;
    final int chunk;
    final int socketBuffer;
    final long peerTimeoutNs;
    final long earlyBufferBytes;
    final boolean ipc;

    private AeronSettings(TransportConfig config) {
        config.checkKnownProperties(PREFIX, KNOWN);
        String dir = config.property(DIR, "").trim();
        this.externalDir = dir.isEmpty() ? null : dir;
        this.idle = config.property(IDLE, "backoff").trim().toLowerCase(Locale.ROOT);
        newIdleStrategy(idle); // validates
        String tm = config.property(THREADING, "shared").trim().toUpperCase(Locale.ROOT);
        try {
            this.threading = ThreadingMode.valueOf(tm);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("transport property " + THREADING + " = '" + tm
                    + "': must be shared, shared_network or dedicated");
        }
        long term = config.longProperty(TERM_LENGTH, DEFAULT_TERM_LENGTH);
        if (term < (64 << 10) || term > (1 << 30) || Long.bitCount(term) != 1) {
            throw new IllegalArgumentException("transport property " + TERM_LENGTH + " = " + term
                    + ": must be a power of two in [65536, 1073741824]");
        }
        this.termLength = (int) term;
        long m = config.longProperty(MTU, DEFAULT_MTU);
        if (m < 4096 || m > 65504 || m % 32 != 0) {
            throw new IllegalArgumentException("transport property " + MTU + " = " + m
                    + ": must be a multiple of 32 in [4096, 65504]");
        }
        this.mtu = (int) m;
        long maxChunk = maxMessageLength(termLength) - Wire.HEADER_LENGTH;
        long c = config.longProperty(CHUNK, Math.min(DEFAULT_CHUNK, maxChunk));
        if (c < 1024 || c > maxChunk) {
            throw new IllegalArgumentException("transport property " + CHUNK + " = " + c + ": must be in [1024, "
                    + maxChunk + "] (the largest Aeron message of term length " + termLength + ", less our header)");
        }
        this.chunk = (int) c;
        long sb = config.longProperty(SOCKET_BUFFER, DEFAULT_SOCKET_BUFFER);
        if (sb < 65536 || sb > (1 << 30)) {
            throw new IllegalArgumentException("transport property " + SOCKET_BUFFER + " = " + sb
                    + ": must be in [65536, 1073741824]");
        }
        // Asking for more than the kernel allows only makes Aeron warn; a window beyond the socket buffer drops
        // datagrams on loopback. The window must also stay within half a term.
        long osMax = Math.min(readProcLong("/proc/sys/net/core/rmem_max"), readProcLong("/proc/sys/net/core/wmem_max"));
        this.socketBuffer = (int) Math.max(65536, Math.min(Math.min(sb, osMax), termLength / 2));
        long pt = config.longProperty(PEER_TIMEOUT_MS, DEFAULT_PEER_TIMEOUT_MS);
        if (pt < 500 || pt > 600_000) {
            throw new IllegalArgumentException("transport property " + PEER_TIMEOUT_MS + " = " + pt
                    + ": must be in [500, 600000]");
        }
        this.peerTimeoutNs = TimeUnit.MILLISECONDS.toNanos(pt);
        long eb = config.longProperty(EARLY_BUFFER_BYTES, DEFAULT_EARLY_BUFFER_BYTES);
        if (eb < 0) {
            throw new IllegalArgumentException("transport property " + EARLY_BUFFER_BYTES + " = " + eb
                    + ": must be at least 0");
        }
        this.earlyBufferBytes = eb;
        String ipcValue = config.property(IPC, "true").trim().toLowerCase(Locale.ROOT);
        if (!ipcValue.equals("true") && !ipcValue.equals("false")) {
            throw new IllegalArgumentException("transport property " + IPC + " = '" + ipcValue
                    + "': must be true or false");
        }
        this.ipc = ipcValue.equals("true");
    }

    /**
     * Reads and validates the Aeron properties of a config.
     *
     * @param config the transport config
     * @return the settings
     * @throws IllegalArgumentException naming the offending key and value
     */
    public static AeronSettings from(TransportConfig config) {
        return new AeronSettings(java.util.Objects.requireNonNull(config, "config"));
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

    /**
     * The MTU of IPC publications: Aeron's IPC default (1408) would split eager messages, which must stay one
     * frame, so IPC uses the UDP MTU (measured for 16 MiB messages: 4 KiB 4.9, 8 KiB 5.2, 32 KiB 5.5, 64 KiB
     * 5.3 GB/s; IPC is bound by the copies, not by the frame count).
     */
    int ipcMtu() {
        return mtu;
    }

    /** Largest eager message payload: one unfragmented frame (mtu less Aeron's 32-byte frame header, ours). */
    int eagerLimit() {
        return mtu - 32 - Wire.HEADER_LENGTH;
    }

    /**
     * A fresh idle strategy of the configured kind (idle strategies hold per-thread state).
     *
     * @return the strategy
     */
    IdleStrategy newIdleStrategy() {
        return newIdleStrategy(idle);
    }

    static IdleStrategy newIdleStrategy(String name) {
        switch (name) {
            case "backoff":
                // Spin briefly, yield, then park up to 1 ms: busy while traffic flows, ~0 CPU when idle.
                return new BackoffIdleStrategy(10, 20, TimeUnit.MICROSECONDS.toNanos(1), TimeUnit.MILLISECONDS.toNanos(1));
            case "sleeping":
                return new SleepingMillisIdleStrategy(1);
            case "yielding":
                return new YieldingIdleStrategy();
            case "busyspin":
                return new BusySpinIdleStrategy();
            default:
                throw new IllegalArgumentException("transport property " + IDLE + " = '" + name
                        + "': must be backoff, sleeping, yielding or busyspin");
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

    /** The key of the embedded driver: managers with equal driver settings share one driver per process. */
    String driverKey() {
        return idle + "/" + threading + "/" + peerTimeoutNs + "/" + socketBuffer + "/" + mtu + "/" + termLength;
    }

    @Override
    public String toString() {
        return "AeronSettings{dir=" + (externalDir == null ? "embedded" : externalDir) + ", idle=" + idle
                + ", threading=" + threading + ", termLength=" + termLength + ", mtu=" + mtu + ", chunk=" + chunk
                + ", socketBuffer=" + socketBuffer + ", peerTimeoutMs=" + TimeUnit.NANOSECONDS.toMillis(peerTimeoutNs)
                + ", earlyBufferBytes=" + earlyBufferBytes + ", ipc=" + ipc + "}";
    }
}
