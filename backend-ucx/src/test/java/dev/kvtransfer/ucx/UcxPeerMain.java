package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.process.ChildJvm;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;

/**
 * A peer process for cross-process tests: starts a UCX manager, prints {@code ADDRESS host:port}, then obeys
 * commands the parent sends on {@link #CTRL_TAG}. Exits when told, or when its stdin closes (the parent died),
 * so no child outlives a test run. Reusable: {@link #fork()} starts one and reads its address.
 *
 * <p>Commands (32 bytes, little-endian: op int, unused int, size long, count long, seed long):
 * <ul>
 *   <li>{@link #ECHO}: receive {@code count} messages of {@code size} on {@link #DATA_IN}, each checked against
 *       pattern {@code seed + i}; answer on {@link #STATUS} with the number that matched (or {@code -(i+1)} for
 *       the first mismatch); then send {@code count} messages with pattern {@code REPLY_SEED ^ (seed + i)} on
 *       {@link #DATA_OUT}.</li>
 *   <li>{@link #STREAM}: send {@code count} messages of {@code size} with pattern {@code seed} on
 *       {@link #DATA_OUT} (for kill-mid-transfer tests).</li>
 *   <li>{@link #EXIT}: close and exit 0.</li>
 * </ul>
 */
public final class UcxPeerMain {
    static final int CTRL_TAG = 1;
    static final int DATA_IN = 1 << 10;
    static final int DATA_OUT = (1 << 10) + 1;
    static final int STATUS = (1 << 10) + 2;
    static final int EXIT = 0;
    static final int ECHO = 1;
    static final int STREAM = 2;
    /** Receive a descriptor (its length in {@code size}) on DATA_IN, write the whole region {@code count} times with
     *  pattern {@code seed + i}, then answer 1 on STATUS (or -1 and the error's code ordinal). */
    static final int WRITE = 3;
    /** Register {@code size} bytes (zeroed), send the descriptor's length on STATUS and its bytes on DATA_OUT. */
    static final int REGISTER = 4;
    static final long REPLY_SEED = 0x5EED_0000_0000L;

    private static final HostBufferManager MEMORY = new HostBufferManager();

    private UcxPeerMain() {
    }

    /**
     * Runs the peer.
     *
     * @param args optional: the manager name, then the {@code ucx.oneSided} value (default: the transport's)
     * @throws Exception on any failure (exit code 1)
     */
    public static void main(String[] args) throws Exception {
        dev.kvtransfer.testkit.process.ChildJvm.haltWhenStdinEnds();
        try {
            run(args);
        } catch (Throwable t) {
            // On stdout, which the parent reads (stderr is inherited, and lost inside surefire's forked JVM).
            System.out.println(failure(t));
            System.out.flush();
            System.exit(1);
        }
        System.exit(0);
    }

    /**
     * One line describing a failure and its stack, for a child's stdout.
     *
     * @param t the failure
     * @return {@code FAILED <exception> | at …}
     */
    static String failure(Throwable t) {
        StringBuilder b = new StringBuilder("FAILED ").append(t);
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c != t) {
                b.append(" | caused by ").append(c);
            }
            for (StackTraceElement f : c.getStackTrace()) {
                b.append(" | at ").append(f);
            }
        }
        return b.toString();
    }

    private static void run(String[] args) throws Exception {
        String name = args.length > 0 ? args[0] : "peer";
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(60));
        if (args.length > 1) {
            b.property(UcxSettings.ONE_SIDED, args[1]);
        }
        try (ConnectionManager m = new UcxTransportProvider().create(b.build())) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            MemoryBuffer ctrl = MEMORY.allocate(32, MemoryKind.HOST);
            Connection parent = m.recvConnect(CTRL_TAG, ctrl, 0, 32, Duration.ofMinutes(5));
            while (true) {
                ByteBuffer c = ctrl.asByteBuffer();
                int op = c.getInt(0);
                long size = c.getLong(8);
                long count = c.getLong(16);
                long seed = c.getLong(24);
                if (op == EXIT) {
                    break;
                }
                MemoryBuffer data = MEMORY.allocate(Math.max(size, 8), MemoryKind.HOST);
                if (op == ECHO) {
                    long status = count;
                    for (long i = 0; i < count; i++) {
                        parent.recv(DATA_IN, data, 0, size);
                        if (status == count && !UcxCrossProcessTest.matches(data, size, seed + i)) {
                            status = -(i + 1);
                        }
                    }
                    MemoryBuffer st = MEMORY.allocate(8, MemoryKind.HOST);
                    st.asByteBuffer().putLong(0, status);
                    parent.send(STATUS, st, 0, 8);
                    for (long i = 0; i < count; i++) {
                        UcxTestSupport.fill(data, 0, size, REPLY_SEED ^ (seed + i));
                        parent.send(DATA_OUT, data, 0, size);
                    }
                } else if (op == STREAM) {
                    UcxTestSupport.fill(data, 0, size, seed);
                    for (long i = 0; i < count; i++) {
                        parent.send(DATA_OUT, data, 0, size);
                    }
                } else if (op == WRITE) {
                    parent.recv(DATA_IN, data, 0, size);
                    byte[] raw = new byte[(int) size];
                    data.asByteBuffer().get(0, raw);
                    RegionDescriptor d = RegionDescriptor.readFrom(WireReader.raw(raw));
                    MemoryBuffer src = MEMORY.allocate(d.length(), MemoryKind.HOST);
                    MemoryBuffer st = MEMORY.allocate(8, MemoryKind.HOST);
                    long status = 1;
                    try {
                        for (long i = 0; i < count; i++) {
                            UcxTestSupport.fill(src, 0, d.length(), seed + i);
                            parent.write(new WriteBatch().add(src, 0, d, 0, d.length()), Duration.ofSeconds(60));
                        }
                    } catch (TransportException e) {
                        status = -1 - e.code().ordinal();
                    }
                    st.asByteBuffer().putLong(0, status);
                    parent.send(STATUS, st, 0, 8);
                } else if (op == REGISTER) {
                    MemoryBuffer region = MEMORY.allocate(size, MemoryKind.HOST);
                    RegisteredRegion r = m.register(region);
                    WireWriter w = WireWriter.raw();
                    r.descriptor().writeTo(w);
                    byte[] raw = w.toByteArray();
                    MemoryBuffer st = MEMORY.allocate(8, MemoryKind.HOST);
                    st.asByteBuffer().putLong(0, raw.length);
                    parent.send(STATUS, st, 0, 8);
                    MemoryBuffer out = MEMORY.allocate(raw.length, MemoryKind.HOST);
                    out.asByteBuffer().put(0, raw);
                    parent.send(DATA_OUT, out, 0, raw.length);
                } else {
                    throw new IllegalStateException("unknown op " + op);
                }
                parent.recv(CTRL_TAG, ctrl, 0, 32, Duration.ofMinutes(5));
            }
        }
    }

    /** A forked peer: its process and address. */
    static final class Child implements AutoCloseable {
        final ChildJvm jvm;
        final Process process;
        final String address;

        Child(ChildJvm jvm, String address) {
            this.jvm = jvm;
            this.process = jvm.process();
            this.address = address;
        }

        /**
         * What the child said and how it stands, for a failed exchange's message: alive or its exit code, and its
         * {@code FAILED} line if it printed one within a second.
         *
         * @return a description
         */
        String diagnose() {
            String said;
            try {
                said = jvm.awaitLine("FAILED", Duration.ofSeconds(1));
            } catch (IllegalStateException e) {
                said = "no FAILED line (" + e.getMessage() + ")";
            }
            return "child " + process.pid() + " " + (process.isAlive() ? "alive" : "exited " + process.exitValue())
                    + ": " + said;
        }

        @Override
        public void close() {
            jvm.close();
        }
    }

    /**
     * Starts a peer JVM on this test's class path (testkit's {@link ChildJvm}) and waits (bounded) for its
     * address.
     *
     * @return the running child
     * @throws Exception if it did not report an address within 60 s
     */
    static Child fork() throws Exception {
        return fork("auto");
    }

    /**
     * Like {@link #fork()} with a {@code ucx.oneSided} value for the child's manager.
     *
     * @param oneSided {@code auto}, {@code native} or {@code emulated}
     * @return the running child
     * @throws Exception if it did not report an address within 60 s
     */
    static Child fork(String oneSided) throws Exception {
        ChildJvm jvm = ChildJvm.start(UcxPeerMain.class, "256m", List.of("child", oneSided));
        try {
            return new Child(jvm, jvm.awaitLine("ADDRESS ", Duration.ofSeconds(60)));
        } catch (RuntimeException e) {
            jvm.close();
            throw e;
        }
    }
}
