package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A peer rank in its own JVM for the cross-process tests: starts an Aeron manager, prints
 * {@code ADDRESS host:port}, then plays a role against the parent's address and prints {@code DONE}.
 *
 * <ul>
 *   <li>{@code echo <parent> <tag> <size,size,...>}: for each size i: receive a message of that size on
 *       {@code tag} (via recvConnect first), verify {@link TestPattern} seed {@code i}, send back seed
 *       {@code 1000 + i} on {@code tag + 1}.</li>
 *   <li>{@code source <parent> <tag> <size> <count>}: send {@code count} messages of {@code size}, seed
 *       {@code i}, printing {@code SENT i} after each (the kill test kills it while it streams).</li>
 *   <li>{@code serve <unused> <tag>}: until its stdin closes, answer every 8-byte length on {@code tag} from
 *       anyone by receiving that many bytes on {@code tag + 1} and sending them back with every byte plus one;
 *       failures of one exchange (a peer lost, a deadline) are printed and the loop goes on, and
 *       {@code RECOVERIES n} is printed whenever the transport rebuilt its client (the stall test).</li>
 * </ul>
 * Exit code 0 on success, 2 on a byte mismatch, 1 on any other failure (the stack trace goes to stderr).
 */
public final class AeronPeerMain {
    private AeronPeerMain() {
    }

    /**
     * Entry point.
     *
     * @param args see the class comment; trailing {@code key=value} pairs are transport properties
     */
    public static void main(String[] args) {
        try {
            run(args);
            System.out.println("DONE");
            System.out.flush();
            System.exit(0);
        } catch (AssertionError e) {
            e.printStackTrace();
            System.out.println("MISMATCH " + e.getMessage());
            System.out.flush();
            System.exit(2);
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.println("FAILED " + e);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void serve(AeronConnectionManager m, int tag) {
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // the parent holds our stdin open while it wants us
                }
            } catch (java.io.IOException e) {
                // parent gone
            }
            Runtime.getRuntime().halt(0);
        }, "stdin-watch");
        stdin.setDaemon(true);
        stdin.start();
        long recoveries = 0;
        try (OffHeapBuffer len = OffHeapBuffer.allocate(8); OffHeapBuffer data = OffHeapBuffer.allocate(16 << 20)) {
            while (true) {
                long r = m.counters().get("clientRecoveries");
                if (r != recoveries) {
                    recoveries = r;
                    System.out.println("RECOVERIES " + r);
                    System.out.flush();
                }
                try {
                    Connection c = m.pollConnect(tag, len, 0, 8, Duration.ofMillis(200));
                    if (c == null) {
                        continue;
                    }
                    long n = len.asByteBuffer().getLong(0);
                    c.recv(tag + 1, data, 0, n, Duration.ofSeconds(10));
                    java.nio.ByteBuffer b = data.asByteBuffer();
                    for (int i = 0; i < n; i++) {
                        b.put(i, (byte) (b.get(i) + 1));
                    }
                    c.send(tag + 1, data, 0, n, Duration.ofSeconds(10));
                    System.out.println("SERVED " + n);
                    System.out.flush();
                } catch (dev.kvtransfer.api.transport.TransportException e) {
                    System.out.println("ERR " + e.getMessage());
                    System.out.flush();
                }
            }
        }
    }

    private static void run(String[] args) {
        String role = args[0];
        String parent = args[1];
        int tag = Integer.parseInt(args[2]);
        TransportConfig.Builder cfg = TransportConfig.builder().name("child-" + role)
                .defaultTimeout(Duration.ofSeconds(60)).errorHandler(e -> {
                    System.out.println("BACKGROUND " + e);
                    System.out.flush();
                });
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq > 0) {
                cfg.property(a.substring(0, eq), a.substring(eq + 1));
            }
        }
        try (ConnectionManager m = new AeronTransportProvider().create(cfg.build())) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            if (role.equals("echo")) {
                List<Long> sizes = new ArrayList<>();
                for (String s : args[3].split(",")) {
                    sizes.add(Long.parseLong(s));
                }
                long max = sizes.stream().mapToLong(Long::longValue).max().orElse(0);
                try (OffHeapBuffer buf = OffHeapBuffer.allocate(max)) {
                    Connection back = null;
                    for (int i = 0; i < sizes.size(); i++) {
                        long size = sizes.get(i);
                        if (back == null) {
                            back = m.recvConnect(tag, buf, 0, size);
                        } else {
                            back.recv(tag, buf, 0, size);
                        }
                        TestPattern.assertPattern(buf, 0, size, i);
                        TestPattern.fill(buf, 0, size, 1000 + i);
                        back.send(tag + 1, buf, 0, size);
                    }
                }
            } else if (role.equals("source")) {
                long size = Long.parseLong(args[3]);
                int count = Integer.parseInt(args[4]);
                Connection c = m.connection(parent);
                try (OffHeapBuffer buf = OffHeapBuffer.allocate(size)) {
                    for (int i = 0; i < count; i++) {
                        TestPattern.fill(buf, 0, size, i);
                        c.send(tag, buf, 0, size);
                        System.out.println("SENT " + i);
                        System.out.flush();
                    }
                }
            } else if (role.equals("serve")) {
                serve((AeronConnectionManager) m, tag);
            } else {
                throw new IllegalArgumentException("role " + role + ": expected echo, source or serve");
            }
        }
    }
}
