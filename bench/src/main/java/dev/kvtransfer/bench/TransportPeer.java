package dev.kvtransfer.bench;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The far end of {@code kvtransfer bench --peer process}: a child JVM with one endpoint of the backend, driven by the
 * bench over the measured connection itself. It prints {@code KVBENCH-PEER <address>}, accepts the bench's hello,
 * then serves commands (40-byte messages: op, size, count, seed, warm-up) until {@code QUIT}: {@code SOURCE} sends
 * {@code count} messages of {@code size} from two sources filled with {@code KvPattern} seeds {@code seed} and
 * {@code seed + 1}, alternating (as the in-JVM sender does); {@code ECHO} receives and returns {@code count} round
 * trips. After each command it sends {@code DONE} with, for {@code SOURCE}, its {@code System.nanoTime()} when it
 * started the first timed message (the bench's clock: CLOCK_MONOTONIC is shared by the processes of a host). Every wait is bounded by the timeout given; when its standard
 * input ends (the bench went away) it exits.
 */
public final class TransportPeer {
    static final int HELLO = Tags.FIRST_DATA_TAG + 11;
    static final int DATA = Tags.FIRST_DATA_TAG + 12;
    static final int PING = Tags.FIRST_DATA_TAG + 13;
    static final int PONG = Tags.FIRST_DATA_TAG + 14;
    static final int CMD = Tags.FIRST_DATA_TAG + 16;
    static final int DONE = Tags.FIRST_DATA_TAG + 17;
    static final long OP_SOURCE = 1;
    static final long OP_ECHO = 2;
    static final long OP_QUIT = 3;
    static final String ADDRESS_PREFIX = "KVBENCH-PEER ";
    /** A command: op, size, count, seed, warm-up count (little-endian longs). */
    static final int CMD_BYTES = 40;

    private TransportPeer() {
    }

    /**
     * @param args backend name, timeout in seconds, then transport properties as {@code key=value}
     */
    public static void main(String[] args) {
        System.setProperty("chronicle.analytics.disable", "true");
        if (args.length < 2) {
            System.err.println("usage: TransportPeer <backend> <timeout-s> [key=value ...]");
            System.exit(2);
        }
        Thread watchdog = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // the bench keeps our standard input open while it runs
                }
            } catch (java.io.IOException e) {
                // treated as the end
            }
            System.exit(3);
        }, "bench-peer-stdin");
        watchdog.setDaemon(true);
        watchdog.start();
        try {
            serve(args);
            System.exit(0);
        } catch (RuntimeException e) {
            System.err.println("kvtransfer bench peer: " + e);
            System.exit(1);
        }
    }

    private static void serve(String[] args) {
        Duration timeout = Duration.ofSeconds(Long.parseLong(args[1]));
        Map<String, String> props = new LinkedHashMap<>();
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq < 1) {
                throw new IllegalArgumentException("transport property '" + args[i] + "': expected key=value");
            }
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        TransportConfig config = TransportConfig.builder().name("bench-peer").defaultTimeout(timeout)
                .properties(props).build();
        try (HostBufferManager memory = new HostBufferManager();
             ConnectionManager m = Plugins.discover().transport(args[0]).create(config)) {
            System.out.println(ADDRESS_PREFIX + m.localAddress());
            System.out.flush();
            MemoryBuffer cmd = memory.allocate(CMD_BYTES, MemoryKind.HOST);
            MemoryBuffer done = memory.allocate(8, MemoryKind.HOST);
            MemoryBuffer[] src = new MemoryBuffer[2];
            MemoryBuffer echo = null;
            long bufferSize = -1;
            try {
                Connection c = m.recvConnect(HELLO, cmd, 0, 8, timeout);
                while (true) {
                    c.recv(CMD, cmd, 0, CMD_BYTES, timeout);
                    ByteBuffer bb = cmd.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
                    long op = bb.getLong(0);
                    long size = bb.getLong(8);
                    long count = bb.getLong(16);
                    long seed = bb.getLong(24);
                    long warmup = bb.getLong(32);
                    long timedStart = 0;
                    if (op == OP_QUIT) {
                        return;
                    }
                    if (size != bufferSize) {
                        closeAll(src[0], src[1], echo);
                        src[0] = memory.allocate(size, MemoryKind.HOST);
                        src[1] = memory.allocate(size, MemoryKind.HOST);
                        echo = memory.allocate(size, MemoryKind.HOST);
                        bufferSize = size;
                    }
                    if (op == OP_SOURCE) {
                        TransportBench.fill(src[0], seed);
                        TransportBench.fill(src[1], seed + 1);
                        for (long i = 0; i < count; i++) {
                            if (i == warmup) {
                                timedStart = System.nanoTime();
                            }
                            c.send(DATA, src[(int) (i & 1)], 0, size, timeout);
                        }
                    } else if (op == OP_ECHO) {
                        for (long i = 0; i < count; i++) {
                            c.recv(PING, echo, 0, size, timeout);
                            c.send(PONG, echo, 0, size, timeout);
                        }
                    } else {
                        throw new IllegalArgumentException("unknown command " + op);
                    }
                    done.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).putLong(0, timedStart);
                    c.send(DONE, done, 0, 8, timeout);
                }
            } finally {
                closeAll(src[0], src[1], echo, cmd, done);
            }
        }
    }

    private static void closeAll(MemoryBuffer... bs) {
        for (MemoryBuffer b : bs) {
            if (b != null) {
                b.close();
            }
        }
    }
}
