package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/**
 * SPEC.md §1 rules of deadlines, close, threads, descriptors, discovery, configuration, processes and the optional
 * capabilities (peer-failure detection, device memory). Part of {@link TransportConformanceTest}, which a backend
 * extends.
 */
public abstract class TransportLifecycleRules extends TransportDeliveryRules {
    @Test
    public void required_spec1_11_recvDeadlineIsTimeout() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        Duration deadline = Duration.ofMillis(300);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ba.recv(7100, dst, 0, 8, deadline))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        assertThat(took).isGreaterThanOrEqualTo(deadline.minusMillis(5)).isLessThan(deadline.plus(timeoutSlack()));
        // A message sent after the timeout is still delivered to the next receive.
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer src = buffer(8);
        fill(src, 0, 8, 71);
        ab.send(7100, src, 0, 8);
        ba.recv(7100, dst, 0, 8);
        verify(dst, 0, 8, 71);
    }

    @Test
    public void required_spec1_12_recvConnectDeadlineIsTimeout() {
        ConnectionManager a = newManager();
        MemoryBuffer dst = buffer(8);
        Duration deadline = Duration.ofMillis(300);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> a.recvConnect(19, dst, 0, 8, deadline))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        assertThat(took).isGreaterThanOrEqualTo(deadline.minusMillis(5)).isLessThan(deadline.plus(timeoutSlack()));
    }

    @Test
    public void required_spec1_13_closeWakesBlockedCallsWithTransportClosed() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer d1 = buffer(8);
        MemoryBuffer d2 = buffer(8);
        ExecutorService ex = threads(2);
        CountDownLatch started = new CountDownLatch(2);
        List<Thread> blocked = java.util.Collections.synchronizedList(new ArrayList<>());
        Future<?> recv = ex.submit(() -> {
            blocked.add(Thread.currentThread());
            started.countDown();
            ba.recv(7200, d1, 0, 8, Duration.ofSeconds(60));
            return null;
        });
        Future<?> accept = ex.submit(() -> {
            blocked.add(Thread.currentThread());
            started.countDown();
            b.recvConnect(7201, d2, 0, 8); // the untimed form: waits until close
            return null;
        });
        assertThat(started.await(30, TimeUnit.SECONDS)).isTrue();
        awaitParked(new ArrayList<>(blocked));
        // Closing must wake them whether they are already waiting or about to.
        b.close();
        for (Future<?> f : List.of(recv, accept)) {
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> get(f)).isInstanceOf(TransportClosedException.class);
            assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(30));
        }
    }

    @Test
    public void required_spec1_14_afterCloseNothingRunsAndCallsFail() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer buf = buffer(8);
        a.close();
        a.close(); // idempotent
        assertThat(a.isRunning()).isFalse();
        assertThatThrownBy(() -> ab.send(7300, buf, 0, 8)).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> ab.recv(7300, buf, 0, 8, Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> a.recvConnect(7300, buf, 0, 8, Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        assertThat(b.isRunning()).isTrue();
    }

    @Test
    public void required_spec1_15_getConnectionsReturnsOnePerRankInOrder() throws Exception {
        ConnectionManager self = newManager();
        List<ConnectionManager> peers = List.of(newManager(), newManager(), newManager());
        List<String> addrs = new ArrayList<>();
        for (ConnectionManager p : peers) {
            addrs.add(p.localAddress());
        }
        List<Connection> cs = self.getConnections(new CommState(provider().name(), addrs, 0));
        assertThat(cs).hasSize(3);
        MemoryBuffer src = buffer(16);
        MemoryBuffer dst = buffer(16);
        for (int i = 0; i < 3; i++) {
            assertThat(cs.get(i).peer()).isEqualTo(addrs.get(i));
            fill(src, 0, 16, 10 + i);
            cs.get(i).send(7400, src, 0, 16);
            peers.get(i).connection(self.localAddress()).recv(7400, dst, 0, 16);
            verify(dst, 0, 16, 10 + i);
        }
    }

    @Test
    public void required_spec1_16_noThreadOutlivesClose() throws Exception {
        Set<Thread> before = LeakChecks.liveThreads();
        ConnectionManager a = provider().create(config("leak-a"));
        ConnectionManager b = provider().create(config("leak-b"));
        try {
            MemoryBuffer src = buffer(1 << 16);
            MemoryBuffer dst = buffer(1 << 16);
            fill(src, 0, 1 << 16, 3);
            Connection ab = a.connection(b.localAddress());
            CompletableFuture<Void> sent = CompletableFuture.runAsync(() -> ab.send(7500, src, 0, 1 << 16),
                    threads(1));
            b.connection(a.localAddress()).recv(7500, dst, 0, 1 << 16);
            sent.get(60, TimeUnit.SECONDS);
            verify(dst, 0, 1 << 16, 3);
        } finally {
            a.close();
            b.close();
        }
        for (ExecutorService e : executors) {
            e.shutdownNow();
            assertThat(e.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
        }
        LeakChecks.assertNoNewThreads(before, threadEndBound());
    }

    @Test
    public void required_spec1_17_untimedRecvConnectOutlivesTheDefaultTimeout() throws Exception {
        Duration shortDefault = Duration.ofMillis(300);
        ConnectionManager a = newManager(b -> b.defaultTimeout(shortDefault));
        ConnectionManager b = newManager();
        MemoryBuffer dst = buffer(16);
        ExecutorService ex = threads(1);
        Future<Connection> accepted = ex.submit(() -> a.recvConnect(7800, dst, 0, 16));
        // The untimed form waits until a message arrives or close: never the default timeout.
        org.awaitility.Awaitility.await().during(shortDefault.multipliedBy(4)).atMost(shortDefault.multipliedBy(20))
                .until(() -> !accepted.isDone());
        MemoryBuffer src = buffer(16);
        fill(src, 0, 16, 78);
        b.connection(a.localAddress()).send(7800, src, 0, 16);
        Connection c = get(accepted);
        assertThat(c.peer()).isEqualTo(b.localAddress());
        verify(dst, 0, 16, 78);
        assertThat(a.connection(b.localAddress()).defaultTimeout()).isEqualTo(shortDefault);
        assertThat(a.defaultTimeout()).isEqualTo(shortDefault);
    }

    @Test
    public void required_spec1_18_pollConnectReturnsNullWhenNothingArrivedAndNeverThrowsATimeout() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        MemoryBuffer dst = buffer(24);
        long t0 = System.nanoTime();
        assertThat(a.pollConnect(7900, dst, 0, 24, Duration.ZERO)).as("non-blocking poll, nothing sent").isNull();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(timeoutSlack());
        Duration wait = Duration.ofMillis(200);
        t0 = System.nanoTime();
        assertThat(a.pollConnect(7900, dst, 0, 24, wait)).isNull();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isGreaterThanOrEqualTo(wait.minusMillis(5))
                .isLessThan(wait.plus(timeoutSlack()));
        MemoryBuffer src = buffer(24);
        fill(src, 0, 24, 79);
        b.connection(a.localAddress()).send(7900, src, 0, 24);
        Connection[] got = new Connection[1];
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1))
                .until(() -> (got[0] = a.pollConnect(7900, dst, 0, 24, Duration.ZERO)) != null);
        assertThat(got[0].peer()).isEqualTo(b.localAddress());
        verify(dst, 0, 24, 79);
        a.close();
        assertThatThrownBy(() -> a.pollConnect(7900, dst, 0, 24, Duration.ZERO))
                .isInstanceOf(TransportClosedException.class);
    }

    @Test
    public void required_spec1_26_pollConnectWhoseWaitEndsNeverLosesAMessage() throws Exception {
        // The control plane polls with short waits all the time: a wait that ends while a message is arriving must
        // leave that message to a later poll, never drop it.
        ConnectionManager a = newManager();
        int senders = 2;
        int perSender = 1000;
        int size = 4096 + 24;
        List<ConnectionManager> from = new ArrayList<>();
        for (int s = 0; s < senders; s++) {
            from.add(newManager());
        }
        ExecutorService ex = threads(senders);
        List<Future<?>> sends = new ArrayList<>();
        for (int s = 0; s < senders; s++) {
            Connection c = from.get(s).connection(a.localAddress());
            long seedBase = (s + 1) * 1_000_000L;
            sends.add(ex.submit(() -> {
                MemoryBuffer src = buffer(size);
                for (int i = 0; i < perSender; i++) {
                    fill(src, 0, size, seedBase + i);
                    c.send(8600, src, 0, size);
                }
                return null;
            }));
        }
        Duration[] waits = {Duration.ZERO, Duration.ofNanos(1_000), Duration.ofNanos(20_000),
                Duration.ofNanos(200_000), Duration.ofMillis(1)};
        java.util.Map<String, Integer> next = new java.util.HashMap<>();
        for (ConnectionManager m : from) {
            next.put(m.localAddress(), 0);
        }
        MemoryBuffer dst = buffer(size);
        Duration bound = Duration.ofSeconds(60);
        long deadline = System.nanoTime() + bound.toNanos();
        int polls = 0;
        for (int got = 0; got < senders * perSender; polls++) {
            assertThat(System.nanoTime() - deadline).as("messages taken by polls within %s: %d of %d (next per"
                    + " sender: %s)", bound, got, senders * perSender, next).isNegative();
            Connection c = a.pollConnect(8600, dst, 0, size, waits[polls % waits.length]);
            if (c == null) {
                continue;
            }
            Integer i = next.get(c.peer());
            assertThat(i).as("poll returned a connection to %s, not one of the senders %s", c.peer(), next.keySet())
                    .isNotNull();
            int s = 0;
            while (!from.get(s).localAddress().equals(c.peer())) {
                s++;
            }
            // Every byte of the expected next message of that sender: a lost message shows as the next one here.
            verify(dst, 0, size, (s + 1) * 1_000_000L + i);
            next.put(c.peer(), i + 1);
            got++;
        }
        for (Future<?> f : sends) {
            get(f);
        }
        assertThat(a.pollConnect(8600, dst, 0, size, Duration.ofMillis(50))).as("a message beyond those sent").isNull();
    }

    @Test
    public void required_spec1_27_recvWhoseDeadlineEndsNeverLosesAMessage() throws Exception {
        // The control plane receives infos with waits of microseconds and tries again: a receive whose deadline ends
        // while its message is arriving fails TIMEOUT and leaves that message to the next receive.
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        int count = 2000;
        int size = 4096 + 24;
        Connection ba = b.connection(a.localAddress());
        Future<?> sends = threads(1).submit(() -> {
            MemoryBuffer src = buffer(size);
            for (int i = 0; i < count; i++) {
                fill(src, 0, size, 3_000_000L + i);
                ba.send(8700, src, 0, size);
            }
            return null;
        });
        Connection ab = a.connection(b.localAddress());
        Duration[] waits = {Duration.ofNanos(1_000), Duration.ofNanos(20_000), Duration.ofNanos(200_000),
                Duration.ofMillis(1)};
        MemoryBuffer dst = buffer(size);
        Duration bound = Duration.ofSeconds(60);
        long deadline = System.nanoTime() + bound.toNanos();
        int timeouts = 0;
        for (int got = 0, tries = 0; got < count; tries++) {
            assertThat(System.nanoTime() - deadline).as("messages received within %s: %d of %d", bound, got, count)
                    .isNegative();
            try {
                ab.recv(8700, dst, 0, size, waits[tries % waits.length]);
            } catch (TransportException e) {
                assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.TIMEOUT);
                timeouts++;
                continue;
            }
            // Every byte of the next message: a lost one shows as the one after it here.
            verify(dst, 0, size, 3_000_000L + got);
            got++;
        }
        get(sends);
        assertThatThrownBy(() -> ab.recv(8700, dst, 0, size, Duration.ofMillis(50)))
                .as("a message beyond those sent (after %d timeouts)", timeouts)
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
    }

    @Test
    public void required_spec1_20_closeReleasesEveryFileDescriptor() throws Exception {
        java.nio.file.Path fds = java.nio.file.Path.of("/proc/self/fd");
        Assumptions.assumeTrue(java.nio.file.Files.isDirectory(fds), "skipped: no /proc/self/fd on this OS");
        cycle(); // loads classes and opens the jars they come from, which stay open
        int before = openFds(fds);
        for (int i = 0; i < 4; i++) {
            cycle();
        }
        // A manager that leaks even one descriptor per close leaks 8 here; the JVM itself may open one or two.
        org.awaitility.Awaitility.await().atMost(threadEndBound()).pollInterval(Duration.ofMillis(50))
                .untilAsserted(() -> assertThat(openFds(fds)).as("open file descriptors after 4 open/use/close"
                        + " cycles of two managers (before: %d)", before).isLessThanOrEqualTo(before + 2));
    }

    private void cycle() throws Exception {
        ConnectionManager a = provider().create(config("fd-a"));
        ConnectionManager b = provider().create(config("fd-b"));
        try {
            MemoryBuffer src = buffer(4096);
            MemoryBuffer dst = buffer(4096);
            fill(src, 0, 4096, 9);
            a.connection(b.localAddress()).send(8000, src, 0, 4096);
            b.connection(a.localAddress()).recv(8000, dst, 0, 4096, Duration.ofSeconds(30));
            verify(dst, 0, 4096, 9);
        } finally {
            a.close();
            b.close();
        }
    }

    private static int openFds(java.nio.file.Path fds) throws java.io.IOException {
        try (var s = java.nio.file.Files.list(fds)) {
            return (int) s.count();
        }
    }

    @Test
    public void required_spec1_21_providerIsFoundThroughServiceLoader() {
        List<TransportProvider> found = java.util.ServiceLoader.load(TransportProvider.class).stream()
                .map(java.util.ServiceLoader.Provider::get).toList();
        assertThat(found).as("providers registered in META-INF/services")
                .anySatisfy(p -> {
                    assertThat(p.name()).isEqualTo(provider().name());
                    assertThat(p.getClass()).isEqualTo(provider().getClass());
                });
        TransportProvider p = found.stream().filter(x -> x.name().equals(provider().name())).findFirst()
                .orElseThrow();
        assertThat(p.isAvailable()).isEqualTo(provider().isAvailable());
        assertThat(p.capabilities()).isEqualTo(provider().capabilities());
    }

    @Test
    public void required_spec1_22_unknownPropertiesOfTheTransportsOwnPrefixAreRefused() {
        String key = provider().name() + ".noSuchSetting";
        assertThatThrownBy(() -> provider().create(config("typo").toBuilder().property(key, "1").build()))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining(key).hasMessageContaining("known");
        // Properties of other transports are left alone: one map may configure them all.
        newManager(b -> b.property("someothertransport.setting", "x"));
    }

    @Test
    public void required_spec1_23_crossProcessWhenDeclared() throws Exception {
        boolean declared = provider().capabilities().contains(TransportCapability.CROSS_PROCESS);
        TransportConfig base = config("cross");
        List<String> args = new ArrayList<>();
        args.add(provider().name());
        args.add(base.host());
        base.properties().forEach((k, v) -> args.add(k + "=" + v));
        try (dev.kvtransfer.testkit.process.ChildJvm child = dev.kvtransfer.testkit.process.ChildJvm.start(
                dev.kvtransfer.testkit.process.TransportEchoMain.class, "256m", args)) {
            String address = child.awaitLine("ADDRESS ", Duration.ofSeconds(60));
            ConnectionManager self = newManager();
            MemoryBuffer len = buffer(8);
            if (!declared) {
                // Not declared: a manager of another process is unreachable, and the send says so.
                len.asByteBuffer().putLong(0, 1);
                assertThatThrownBy(() -> self.connection(address).send(
                        dev.kvtransfer.testkit.process.TransportEchoMain.ECHO_TAG, len, 0, 8, Duration.ofSeconds(5)))
                        .as("send to a manager in another process without CROSS_PROCESS")
                        .isInstanceOf(TransportException.class);
                return;
            }
            Connection c = self.connection(address);
            for (long n : new long[] {1, 4097, (1L << 20) + 13}) {
                MemoryBuffer src = buffer(n);
                MemoryBuffer dst = buffer(n);
                fill(src, 0, n, 230 + n);
                len.asByteBuffer().putLong(0, n);
                c.send(dev.kvtransfer.testkit.process.TransportEchoMain.ECHO_TAG, len, 0, 8);
                ExecutorService ex = threads(1);
                Future<?> sent = ex.submit(() -> c.send(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG,
                        src, 0, n));
                c.recv(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG, dst, 0, n, Duration.ofSeconds(60));
                get(sent);
                ByteBuffer s = src.asByteBuffer();
                ByteBuffer d = dst.asByteBuffer();
                for (int i = 0; i < n; i++) {
                    if (d.get(i) != (byte) (s.get(i) + 1)) {
                        fail("byte " + i + " of the " + n + "-byte echo from the other process: expected "
                                + (byte) (s.get(i) + 1) + ", found " + d.get(i));
                    }
                }
            }
            if (provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION)) {
                child.process().destroyForcibly();
                long t0 = System.nanoTime();
                assertThatThrownBy(() -> c.recv(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG, len, 0,
                        8, peerLossBound().multipliedBy(3))).isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).as("receive from a killed process: %s", e)
                                .isEqualTo(ErrorCode.PEER_LOST));
                assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound());
            }
        }
    }

    // ---- optional rules: asserted when declared, the documented refusal asserted when not ----

    @Test
    public void optional_spec1_24_peerFailureDetection() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        boolean declared = provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION);
        if (!declared) {
            // Without detection, a receive from a dead peer must still end by its deadline.
            a.close();
            assertThatThrownBy(() -> ba.recv(7600, dst, 0, 8, Duration.ofMillis(500)))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isIn(ErrorCode.TIMEOUT, ErrorCode.PEER_LOST));
            return;
        }
        ExecutorService ex = threads(1);
        CountDownLatch started = new CountDownLatch(1);
        Thread[] blocked = new Thread[1];
        Future<?> recv = ex.submit(() -> {
            blocked[0] = Thread.currentThread();
            started.countDown();
            ba.recv(7600, dst, 0, 8, peerLossBound().multipliedBy(3));
            return null;
        });
        assertThat(started.await(30, TimeUnit.SECONDS)).isTrue();
        awaitParked(List.of(blocked[0]));
        long t0 = System.nanoTime();
        a.close();
        assertThatThrownBy(() -> get(recv)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).as("code of %s", e).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound());
        // Later calls to the dead peer fail the same way, fast.
        assertThatThrownBy(() -> ba.recv(7601, dst, 0, 8, peerLossBound().multipliedBy(3)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(b.isRunning()).isTrue();
    }

    @Test
    public void optional_spec1_25_deviceMemory() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        if (!provider().capabilities().contains(TransportCapability.DEVICE_MEMORY)) {
            MemoryBuffer device = new FakeDeviceBuffer(64);
            assertThatThrownBy(() -> ab.send(7700, device, 0, 64))
                    .isInstanceOf(UnsupportedOperationException.class);
            assertThatThrownBy(() -> ba.recv(7700, device, 0, 64, Duration.ofSeconds(5)))
                    .isInstanceOf(UnsupportedOperationException.class);
            return;
        }
        BufferManager dev = deviceBufferManager();
        Assumptions.assumeTrue(dev != null, "skipped: " + provider().name() + " declares DEVICE_MEMORY but this"
                + " machine or test supplies no device BufferManager (no GPU / JCuda): override"
                + " deviceBufferManager() to run it");
        long size = (1L << 20) + 3;
        MemoryBuffer hostSrc = buffer(size);
        MemoryBuffer hostDst = buffer(size);
        fill(hostSrc, 0, size, 77);
        try (MemoryBuffer d1 = dev.allocate(size, MemoryKind.DEVICE);
             MemoryBuffer d2 = dev.allocate(size, MemoryKind.DEVICE)) {
            dev.copy(hostSrc, 0, d1, 0, size);
            dev.synchronize();
            ExecutorService ex = threads(1);
            Future<?> sent = ex.submit(() -> ab.send(7701, d1, 0, size));
            ba.recv(7701, d2, 0, size);
            get(sent);
            dev.copy(d2, 0, hostDst, 0, size);
            dev.synchronize();
            verify(hostDst, 0, size, 77);
        }
    }

    /** A device-kind buffer with no memory behind it, to check that undeclared device support refuses. */
    private static final class FakeDeviceBuffer implements MemoryBuffer {
        private final long size;

        FakeDeviceBuffer(long size) {
            this.size = size;
        }

        @Override
        public long address() {
            return 0x1000_0000L; // never dereferenced: the transport must refuse the kind first
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return MemoryKind.DEVICE;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            java.util.Objects.checkFromIndexSize(offset, length, size);
            return new FakeDeviceBuffer(length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("device memory");
        }

        @Override
        public void close() {
            // Owns nothing.
        }
    }
}
