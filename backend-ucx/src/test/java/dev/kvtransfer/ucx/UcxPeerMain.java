package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.ucx.internal.DirectMemoryBuffer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

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
    static final long REPLY_SEED = 0x5EED_0000_0000L;

    private UcxPeerMain() {
    }

    /**
     * Runs the peer.
     *
     * @param args optional: the manager name
     * @throws Exception on any failure (exit code 1)
     */
    public static void main(String[] args) throws Exception {
        Thread watchdog = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // Parent alive.
                }
            } catch (IOException e) {
                // Treated as EOF.
            }
            Runtime.getRuntime().halt(3);
        }, "parent-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        String name = args.length > 0 ? args[0] : "peer";
        try (ConnectionManager m = new UcxTransportProvider().create(TransportConfig.builder().name(name)
                .defaultTimeout(Duration.ofSeconds(60)).build())) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            MemoryBuffer ctrl = DirectMemoryBuffer.allocate(32);
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
                MemoryBuffer data = DirectMemoryBuffer.allocate(Math.max(size, 8));
                if (op == ECHO) {
                    long status = count;
                    for (long i = 0; i < count; i++) {
                        parent.recv(DATA_IN, data, 0, size);
                        if (status == count && !UcxCrossProcessTest.matches(data, size, seed + i)) {
                            status = -(i + 1);
                        }
                    }
                    MemoryBuffer st = DirectMemoryBuffer.allocate(8);
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
                } else {
                    throw new IllegalStateException("unknown op " + op);
                }
                parent.recv(CTRL_TAG, ctrl, 0, 32, Duration.ofMinutes(5));
            }
        }
        System.exit(0);
    }

    /** A forked peer: its process and address. */
    static final class Child implements AutoCloseable {
        final Process process;
        final String address;

        Child(Process process, String address) {
            this.process = process;
            this.address = address;
        }

        @Override
        public void close() {
            process.destroyForcibly();
            try {
                process.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Forks a peer JVM on this test's class path and waits (bounded) for its address.
     *
     * @return the running child
     * @throws Exception if it did not report an address within 60 s
     */
    static Child fork() throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java"));
        cmd.add("-Xmx256m");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(UcxPeerMain.class.getName());
        cmd.add("child");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        Process p = pb.start();
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        // Read the address on another thread so a silent child cannot block us past the deadline.
        java.util.concurrent.CompletableFuture<String> line = new java.util.concurrent.CompletableFuture<>();
        // It keeps draining the child's stdout afterwards (UCX logs there) so the child never blocks on a pipe.
        Thread reader = new Thread(() -> {
            line.complete(readAddress(out));
            try {
                for (String l; (l = out.readLine()) != null; ) {
                    System.out.println("[child] " + l);
                }
            } catch (IOException e) {
                // Child gone.
            }
        }, "peer-stdout-reader");
        reader.setDaemon(true);
        reader.start();
        String address;
        try {
            address = line.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            address = null;
        }
        if (address == null) {
            p.destroyForcibly();
            throw new IllegalStateException("child did not report its address (exit " + (p.isAlive() ? "n/a"
                    : p.exitValue()) + ")");
        }
        return new Child(p, address);
    }

    private static String readAddress(BufferedReader out) {
        try {
            for (String l; (l = out.readLine()) != null; ) {
                if (l.startsWith("ADDRESS ")) {
                    return l.substring("ADDRESS ".length()).trim();
                }
            }
            return null;
        } catch (IOException e) {
            return null;
        }
    }
}
