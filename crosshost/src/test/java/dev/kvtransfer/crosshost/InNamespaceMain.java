package dev.kvtransfer.crosshost;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;

/**
 * Small helper processes of the namespace tests:
 * <ul>
 *   <li>{@code hang}: prints {@code STARTED <interfaces it sees, sorted>} and then never answers (a hung peer);
 *       it halts when its stdin ends;</li>
 *   <li>{@code exit-without-close}: creates a {@link NetnsPair}, prints {@code CREATED <ns a> <ns b>} and exits
 *       without closing it: only the pair's shutdown hook can remove the namespaces;</li>
 *   <li>{@code probe}: prints {@code AVAILABLE} or {@code UNAVAILABLE <why>} ({@link NetnsPair#unavailabilityCause()}:
 *       the reason the namespace tests give when they skip);</li>
 *   <li>{@code tcp-sink <host> <port>} and {@code tcp-source <host> <port>}: the raw baseline of the link
 *       ({@link RawTcp}): the sink prints {@code LISTENING}, then for each connection reads to its end and prints
 *       {@code RECEIVED <bytes> <nanos from accept to end>}; the source, for each {@code SEND <bytes>} on stdin,
 *       connects, writes that many bytes from a direct buffer, closes and prints {@code SENT <bytes>}. Both halt
 *       when their stdin ends.</li>
 * </ul>
 */
public final class InNamespaceMain {
    private InNamespaceMain() {
    }

    /**
     * Entry point.
     *
     * @param args the mode and its arguments (see the class comment)
     * @throws Exception on any failure (exit code 1)
     */
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "hang" -> {
                String names = Collections.list(NetworkInterface.getNetworkInterfaces()).stream()
                        .map(NetworkInterface::getName).sorted().collect(Collectors.joining(","));
                System.out.println("STARTED " + names);
                System.out.flush();
                haltWhenStdinEnds();
                new CountDownLatch(1).await();
            }
            case "exit-without-close" -> {
                NetnsPair p = NetnsPair.create();
                System.out.println("CREATED " + p.a().namespace() + " " + p.b().namespace());
                System.out.flush();
                System.exit(0);
            }
            case "probe" -> {
                String cause = NetnsPair.unavailabilityCause();
                System.out.println(cause == null ? "AVAILABLE" : "UNAVAILABLE " + cause);
                System.out.flush();
            }
            case "tcp-sink" -> tcpSink(args[1], Integer.parseInt(args[2]));
            case "tcp-source" -> tcpSource(args[1], Integer.parseInt(args[2]));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    private static void haltWhenStdinEnds() {
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // ignore whatever comes: these helpers take no commands on stdin
                }
            } catch (IOException e) {
                // stdin gone: the same as its end
            }
            Runtime.getRuntime().halt(3);
        }, "stdin-watch");
        watcher.setDaemon(true);
        watcher.start();
    }

    private static void tcpSink(String host, int port) throws IOException {
        haltWhenStdinEnds();
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress(host, port));
            System.out.println("LISTENING");
            System.out.flush();
            ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
            while (true) {
                try (SocketChannel c = server.accept()) {
                    long t0 = System.nanoTime();
                    long n = 0;
                    for (int r; (r = c.read(buf.clear())) >= 0; ) {
                        n += r;
                    }
                    System.out.println("RECEIVED " + n + " " + (System.nanoTime() - t0));
                    System.out.flush();
                }
            }
        }
    }

    private static void tcpSource(String host, int port) throws IOException {
        ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            long bytes = Long.parseLong(line.trim().split(" ")[1]);
            try (SocketChannel c = SocketChannel.open(new InetSocketAddress(host, port))) {
                for (long left = bytes; left > 0; ) {
                    buf.clear().limit((int) Math.min(buf.capacity(), left));
                    while (buf.hasRemaining()) {
                        left -= c.write(buf);
                    }
                }
            }
            System.out.println("SENT " + bytes);
            System.out.flush();
        }
        Runtime.getRuntime().halt(3); // stdin ended: the test JVM is done or gone
    }
}
