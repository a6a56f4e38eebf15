package dev.kvtransfer.registry;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.awaitility.Awaitility.await;

/**
 * A real etcd server (Debian's {@code etcd-server}, installed by {@code scripts/install-deps.sh}) on two free
 * loopback ports with its data in a test directory; stop and start again on the same ports and data.
 */
final class EtcdServer implements AutoCloseable {
    static final Path BINARY = Path.of("/usr/bin/etcd");
    private final Path data;
    private final int clientPort;
    private final int peerPort;
    private Process process;

    EtcdServer(Path dir) throws IOException {
        this.data = dir.resolve("etcd-data");
        this.clientPort = freePort();
        this.peerPort = freePort();
    }

    /** @return empty when etcd can run here, else why not (the reason a test is skipped with) */
    static String unavailable() {
        return Files.isExecutable(BINARY) ? "" : "etcd is not installed (" + BINARY + " missing): run "
                + "scripts/install-deps.sh or apt-get install etcd-server";
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    URI url() {
        return URI.create("http://127.0.0.1:" + clientPort);
    }

    String registryUrl() {
        return "etcd://127.0.0.1:" + clientPort;
    }

    EtcdServer start() throws IOException {
        String client = "http://127.0.0.1:" + clientPort;
        String peer = "http://127.0.0.1:" + peerPort;
        process = new ProcessBuilder(List.of(BINARY.toString(), "--name", "kvt", "--data-dir", data.toString(),
                "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer, "--initial-cluster", "kvt=" + peer))
                .redirectErrorStream(true).redirectOutput(data.resolveSibling("etcd-" + System.nanoTime() + ".log")
                        .toFile()).start();
        await().atMost(Duration.ofSeconds(30)).ignoreExceptions().until(() -> {
            try (Socket s = new Socket("127.0.0.1", clientPort)) {
                return process.isAlive();
            }
        });
        return this;
    }

    void stop() throws InterruptedException {
        if (process != null && process.isAlive()) {
            process.destroy();
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
    }

    @Override
    public void close() throws InterruptedException {
        stop();
    }
}
