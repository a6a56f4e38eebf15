package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The bootstrap that replaced UCX's sockaddr listener: what it binds, who it lets in (shared secret: MACs,
 * replays, clock), that a forged hello never takes over a live connection, and that a stalled peer is lost
 * within the liveness timeout.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxBootstrapTest {
    private static final byte[] SECRET = "a deployment secret, 32 bytes..".getBytes(StandardCharsets.US_ASCII);
    private final List<ConnectionManager> managers = new ArrayList<>();

    @AfterEach
    void tearDown() {
        for (ConnectionManager m : managers) {
            m.close();
        }
    }

    private UcxConnectionManager manager(String name, byte[] secret, List<Throwable> errors, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(20))
                .authSecret(secret);
        if (errors != null) {
            b.errorHandler(errors::add);
        }
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        UcxConnectionManager m = new UcxConnectionManager(b.build());
        managers.add(m);
        return m;
    }

    private static void exchange(ConnectionManager a, ConnectionManager b, int tag, long seed) {
        UcxTestSupport.exchange(a, b, tag, seed);
    }

    // ---------------------------------------------------------------- listeners

    /** TCP sockets in LISTEN state that this process owns: "ip:port" (IPv4 and IPv6). */
    static Set<String> listeningSockets() throws IOException {
        Set<String> inodes = new HashSet<>();
        try (var fds = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) fds::iterator) {
                try {
                    String t = Files.readSymbolicLink(p).toString();
                    if (t.startsWith("socket:[")) {
                        inodes.add(t.substring(8, t.length() - 1));
                    }
                } catch (IOException e) {
                    // Closed meanwhile.
                }
            }
        }
        Set<String> out = new HashSet<>();
        for (String file : new String[] {"/proc/net/tcp", "/proc/net/tcp6"}) {
            Path p = Path.of(file);
            if (!Files.exists(p)) {
                continue;
            }
            List<String> lines = Files.readAllLines(p); // read once: other processes change it meanwhile
            for (String line : lines.subList(Math.min(1, lines.size()), lines.size())) {
                String[] f = line.trim().split("\\s+");
                if (f.length > 9 && f[3].equals("0A") && inodes.contains(f[9])) {
                    out.add(decode(f[1]));
                }
            }
        }
        return out;
    }

    private static String decode(String hexAddr) {
        String[] ap = hexAddr.split(":");
        int port = Integer.parseInt(ap[1], 16);
        String h = ap[0];
        if (h.length() == 32 && h.startsWith("0000000000000000FFFF0000")) {
            h = h.substring(24); // IPv4-mapped (a dual-stack socket bound to an IPv4 address)
        }
        if (h.length() == 8) {
            long v = Long.parseLong(h, 16);
            return (v & 0xff) + "." + ((v >> 8) & 0xff) + "." + ((v >> 16) & 0xff) + "." + ((v >> 24) & 0xff) + ":"
                    + port;
        }
        return "[" + h + "]:" + port;
    }

    @Test
    void theOnlyListenersBindTheConfiguredAddress() throws Exception {
        Assumptions.assumeTrue(Files.isDirectory(Path.of("/proc/self/fd")), "needs /proc");
        Set<String> before = listeningSockets();
        UcxConnectionManager shm = manager("listen-shm", null, null);
        Set<String> added = new HashSet<>(listeningSockets());
        added.removeAll(before);
        // Shared-memory mode: our bootstrap listener is the only TCP listener, on exactly host:port.
        assertThat(added).containsExactly(shm.localAddress());
        assertThat(shm.settings().sharedMemory()).isTrue();
        Set<String> before2 = listeningSockets();
        UcxConnectionManager net = manager("listen-net", null, null, UcxSettings.TRANSPORTS, "net");
        Set<String> added2 = new HashSet<>(listeningSockets());
        added2.removeAll(before2);
        // Net mode: UCX's TCP transport listens too, but only on the configured address's device.
        assertThat(added2).contains(net.localAddress()).allSatisfy(a -> assertThat(a).startsWith("127.0.0.1:"));
    }

    // ---------------------------------------------------------------- authentication

    @Test
    void peersWithTheSecretConnectAndPeersWithoutItAreRefusedUnauthorized() throws Exception {
        List<Throwable> reported = Collections.synchronizedList(new ArrayList<>());
        UcxConnectionManager a = manager("auth-a", SECRET, reported);
        UcxConnectionManager b = manager("auth-b", SECRET, null);
        exchange(a, b, 100, 7);
        exchange(b, a, 110, 8);
        byte[] other = SECRET.clone();
        other[3] ^= 1;
        for (byte[] wrong : new byte[][] {other, null}) {
            UcxConnectionManager c = manager("auth-c", wrong, null);
            MemoryBuffer m = buffer(8);
            assertThatThrownBy(() -> c.connection(a.localAddress()).send(120, m, 0, 8, Duration.ofSeconds(10)))
                    .isInstanceOfSatisfying(TransportException.class, e -> {
                        assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNAUTHORIZED);
                        assertThat(e.getMessage()).contains("refused").contains("secret");
                    });
        }
        // Counted on a's bootstrap agent, which may still be finishing the refusal the dialer already read.
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10))
                .untilAsserted(() -> assertThat(a.refusedHandshakes()).isGreaterThanOrEqualTo(2));
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).untilAsserted(() -> assertThat(reported)
                .filteredOn(t -> t instanceof KvTransferException k && k.code() == ErrorCode.UNAUTHORIZED)
                .hasSizeGreaterThanOrEqualTo(2));
        // The genuine pair keeps working.
        exchange(a, b, 130, 9);
        String secretText = new String(SECRET, StandardCharsets.US_ASCII);
        assertThat(reported).noneSatisfy(t -> assertThat(t.getMessage()).contains(secretText));
    }

    @Test
    void aReplayedStaleOrMisaddressedHelloIsRefused() throws Exception {
        UcxConnectionManager a = manager("replay-a", SECRET, null);
        BootstrapFrames.Hello h = RawBootstrapClient.plausibleHello("127.0.0.1:1", a.localAddress(), 77);
        ByteBuffer genuine = RawBootstrapClient.hello(h, SECRET);
        try (RawBootstrapClient c = new RawBootstrapClient(a.localAddress(), Duration.ofSeconds(10))) {
            c.sendFrame(genuine);
            assertThat(RawBootstrapClient.type(c.readFrame())).as("a genuine hello is welcomed")
                    .isEqualTo(BootstrapFrames.WELCOME);
        }
        assertRefused(a, genuine, "replayed");
        BootstrapFrames.Hello stale = new BootstrapFrames.Hello(78, new byte[16], System.currentTimeMillis()
                - 3_600_000, "127.0.0.1:1", a.localAddress(), HostIdentity.id(), BootstrapFrames.MODE_SHM, 5,
                new byte[8]);
        assertRefused(a, RawBootstrapClient.hello(stale, SECRET), "timestamp");
        BootstrapFrames.Hello elsewhere = RawBootstrapClient.plausibleHello("127.0.0.1:1", "127.0.0.1:9", 79);
        assertRefused(a, RawBootstrapClient.hello(elsewhere, SECRET), "meant for");
        assertRefused(a, RawBootstrapClient.hello(RawBootstrapClient.plausibleHello("127.0.0.1:1",
                a.localAddress(), 80), "another secret of 32 bytes......".getBytes(StandardCharsets.US_ASCII)),
                "wrong MAC");
        assertThat(a.refusedHandshakes()).isGreaterThanOrEqualTo(4);
        assertThat(a.connectionsForTest()).as("refused hellos leave no connection behind").isEmpty();
    }

    private static void assertRefused(UcxConnectionManager m, ByteBuffer hello, String why) throws IOException {
        try (RawBootstrapClient c = new RawBootstrapClient(m.localAddress(), Duration.ofSeconds(10))) {
            c.sendFrame(hello);
            ByteBuffer f = c.readFrame();
            assertThat(RawBootstrapClient.type(f)).as("answer to a hello that should be refused (%s)", why)
                    .isEqualTo(BootstrapFrames.REFUSE);
            assertThat(f.get(1) & 0xff).isEqualTo(ErrorCode.UNAUTHORIZED.ordinal());
            int n = f.getShort(2) & 0xffff;
            byte[] reason = new byte[n];
            f.position(4);
            f.get(reason);
            assertThat(new String(reason, StandardCharsets.UTF_8)).contains(why);
            assertThat(c.closedByPeer()).isTrue();
        }
    }

    // ---------------------------------------------------------------- identity bound to the session

    @Test
    void aForgedHelloClaimingAConnectedPeerNeitherTearsItDownNorRebindsIt() throws Exception {
        for (byte[] secret : new byte[][] {null, SECRET}) {
            List<Throwable> reported = Collections.synchronizedList(new ArrayList<>());
            UcxConnectionManager a = manager("forge-a", secret, reported);
            UcxConnectionManager b = manager("forge-b", secret, null);
            exchange(a, b, 200, 1);
            Connection ab = a.connection(b.localAddress());
            long refusedBefore = a.refusedHandshakes();
            // Claims b's address with another instance id; with a secret the forger even holds it (an insider).
            for (long instance : new long[] {42, 43}) {
                BootstrapFrames.Hello forged = RawBootstrapClient.plausibleHello(b.localAddress(), a.localAddress(),
                        instance);
                try (RawBootstrapClient c = new RawBootstrapClient(a.localAddress(), Duration.ofSeconds(10))) {
                    c.sendFrame(RawBootstrapClient.hello(forged, secret));
                    ByteBuffer f = c.readFrame();
                    assertThat(RawBootstrapClient.type(f)).isEqualTo(BootstrapFrames.REFUSE);
                    assertThat(c.closedByPeer()).isTrue();
                }
            }
            assertThat(a.refusedHandshakes()).isEqualTo(refusedBefore + 2);
            // The real connection is untouched: same object, both directions still work, nothing failed.
            assertThat(a.connection(b.localAddress())).isSameAs(ab);
            exchange(a, b, 210, 2);
            exchange(b, a, 220, 3);
            assertThat(reported).filteredOn(t -> t instanceof KvTransferException k && k.code() == ErrorCode.PEER_LOST)
                    .isEmpty();
            assertThat(reported).anySatisfy(t -> assertThat(t.getMessage()).contains("neither tears it down"));
        }
    }

    // ---------------------------------------------------------------- stalls

    @Test
    void aStoppedPeerIsLostWithinTheLivenessTimeoutAndAFreshOneIsServed() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/bin/kill")) || Files.isExecutable(Path.of("/usr/bin/kill")),
                "needs kill(1) for SIGSTOP");
        UcxConnectionManager parent = manager("stall-parent", null, null, UcxSettings.LIVENESS_INTERVAL, "200",
                UcxSettings.LIVENESS_TIMEOUT, "1500");
        try (UcxPeerMain.Child child = UcxPeerMain.fork()) {
            Connection c = parent.connection(child.address);
            UcxCrossProcessTest.echo(c, 4096, 2, 300);
            long pid = child.process.pid();
            signal("STOP", pid);
            try {
                long t0 = System.nanoTime();
                MemoryBuffer m = buffer(8);
                assertThatThrownBy(() -> c.recv(UcxPeerMain.DATA_OUT, m, 0, 8, Duration.ofSeconds(30)))
                        .isInstanceOfSatisfying(TransportException.class, e -> {
                            assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST);
                            assertThat(e.getMessage()).contains("no control traffic");
                        });
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                System.out.println("stall test: receive from a SIGSTOPped peer ended " + ms + " ms after the stop"
                        + " (liveness timeout 1500 ms)");
                assertThat(ms).isLessThan(1500 + 3000);
            } finally {
                signal("CONT", pid);
            }
        }
        try (UcxPeerMain.Child fresh = UcxPeerMain.fork()) {
            UcxCrossProcessTest.echo(parent.connection(fresh.address), 65536, 2, 400);
        }
    }

    private static void signal(String sig, long pid) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
        assertThat(p.waitFor(10, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).isZero();
    }
}
