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

    private static void run(String[] args) {
        String role = args[0];
        String parent = args[1];
        int tag = Integer.parseInt(args[2]);
        TransportConfig.Builder cfg = TransportConfig.builder().name("child-" + role)
                .defaultTimeout(Duration.ofSeconds(60));
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
            } else {
                throw new IllegalArgumentException("role " + role + ": expected echo or source");
            }
        }
    }
}
