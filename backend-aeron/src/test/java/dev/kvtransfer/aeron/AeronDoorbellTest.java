package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.DatagramChannel;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * The doorbell ({@code aeron.doorbell}): a sleeping agent is woken by a peer's ring, only when its flag says it
 * sleeps, at most once per sleep; a ring by datagram (another process) and by a local wake-up both end the sleep;
 * stray datagrams only wake it; a manager's flag file is owner-only and goes with the manager; and a message offered
 * to a manager whose agent sleeps arrives intact after a ring.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronDoorbellTest {
    private static final Duration T = Duration.ofSeconds(20);
    /** A sleep bound far beyond any wake-up: a sleep that ends was woken, or the test would count a timeout. */
    private static final long LONG_SLEEP_NS = TimeUnit.SECONDS.toNanos(30);
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @TempDir
    Path dir;

    @AfterEach
    void stop() throws Exception {
        Doorbell.datagramsOnly = false;
        for (AutoCloseable c : closeables) {
            c.close();
        }
        assertThat(EmbeddedDriver.running()).as("embedded drivers left running").isZero();
    }

    private Doorbell doorbell() {
        Doorbell d = Doorbell.open(dir.toString());
        assertThat(d).as("a doorbell opens on loopback").isNotNull();
        closeables.add(d);
        return d;
    }

    private static long flag(Path file) throws Exception {
        try (FileChannel fc = FileChannel.open(file, StandardOpenOption.READ)) {
            MappedByteBuffer m = fc.map(FileChannel.MapMode.READ_ONLY, 0, Doorbell.FILE_BYTES);
            return new UnsafeBuffer(m).getLongVolatile(Doorbell.FLAG_AT);
        }
    }

    @Test
    void publishesAnOwnerOnlyFlagFileAndWithdrawsIt() throws Exception {
        Doorbell d = doorbell();
        assertThat(d.register(4242)).isTrue();
        Path f = Doorbell.file(dir.toString(), 4242);
        assertThat(Files.getPosixFilePermissions(f)).isEqualTo(PosixFilePermissions.fromString("rw-------"));
        try (FileChannel fc = FileChannel.open(f, StandardOpenOption.READ)) {
            UnsafeBuffer b = new UnsafeBuffer(fc.map(FileChannel.MapMode.READ_ONLY, 0, Doorbell.FILE_BYTES));
            assertThat(b.getInt(Doorbell.MAGIC_AT)).isEqualTo(Doorbell.MAGIC);
            assertThat(b.getInt(Doorbell.PORT_AT)).isEqualTo(d.port());
            assertThat(b.getLong(Doorbell.PID_AT)).isEqualTo(ProcessHandle.current().pid());
            assertThat(b.getLong(Doorbell.FLAG_AT)).isEqualTo(Doorbell.AWAKE);
        }
        d.arm();
        assertThat(flag(f)).isEqualTo(Doorbell.ASLEEP);
        d.disarm();
        assertThat(flag(f)).isEqualTo(Doorbell.AWAKE);
        d.unregister(4242);
        assertThat(f).doesNotExist();
    }

    /** A ring by datagram (as from another process) and by a local wake-up: each ends the sleep, counted as a wake. */
    @ParameterizedTest
    @ValueSource(booleans = {true, false})
    void aRingEndsTheSleepOnceAndOnlyWhenAsleep(boolean datagram) throws Exception {
        Doorbell.datagramsOnly = datagram;
        Doorbell d = doorbell();
        d.register(7);
        Doorbell.Target t = new Doorbell.Target(dir.toString(), 7);
        t.ring();
        assertThat(t.rings).as("an awake agent is not rung").isZero();
        assertThat(t.found()).isTrue();
        d.arm();
        t.ring();
        t.ring();
        assertThat(t.rings).as("one ring per sleep").isEqualTo(1);
        assertThat(flag(Doorbell.file(dir.toString(), 7))).isEqualTo(Doorbell.RUNG);
        d.sleep(LONG_SLEEP_NS);
        assertThat(datagram ? d.wakes.get() : d.localWakes.get()).as("woken by the ring").isEqualTo(1);
        assertThat(d.wakes.get() + d.localWakes.get()).isEqualTo(1);
        assertThat(d.timeouts.get()).isZero();
        assertThat(d.isArmed()).isFalse();
        assertThat(flag(Doorbell.file(dir.toString(), 7))).isEqualTo(Doorbell.AWAKE);
        // Rung and drained: the next sleep is not cut short by the old datagram.
        d.arm();
        d.sleep(TimeUnit.MILLISECONDS.toNanos(1));
        assertThat(d.timeouts.get()).as("a sleep nobody rang runs to its bound").isEqualTo(1);
        // Withdrawn (its manager closed): a sender that still holds the flag never rings it again.
        d.unregister(7);
        d.arm();
        t.ring();
        assertThat(t.rings).isEqualTo(1);
        d.disarm();
    }

    @Test
    void aMissingDoorbellIsNoRingAndIsLookedForAgainLater() {
        Doorbell.Target t = new Doorbell.Target(dir.toString(), 99);
        t.ring();
        assertThat(t.found()).isFalse();
        assertThat(t.rings).isZero();
        Doorbell d = doorbell();
        d.register(99);
        d.arm();
        t.ring(); // within the retry interval: not looked for yet
        assertThat(t.found()).isFalse();
        await().atMost(Duration.ofSeconds(10)).until(() -> {
            t.ring();
            return t.found();
        });
        assertThat(t.rings).isEqualTo(1);
    }

    @Test
    void aFileWithoutTheMarkerIsNoDoorbell() throws Exception {
        Path f = Doorbell.file(dir.toString(), 5);
        Files.createDirectories(f.getParent());
        Files.write(f, new byte[Doorbell.FILE_BYTES]);
        Doorbell.Target t = new Doorbell.Target(dir.toString(), 5);
        t.ring();
        assertThat(t.found()).isFalse();
    }

    /** Anyone who can reach the port can only wake the agent: the sleep ends, the flag is reset, nothing else. */
    @Test
    void strayDatagramsOnlyWake() throws Exception {
        Doorbell d = doorbell();
        d.register(11);
        d.arm();
        try (DatagramChannel ch = DatagramChannel.open()) {
            for (int i = 0; i < 5; i++) {
                ch.send(ByteBuffer.wrap(new byte[] {1, 2, 3}),
                        new InetSocketAddress(InetAddress.getLoopbackAddress(), d.port()));
            }
        }
        d.sleep(LONG_SLEEP_NS);
        assertThat(d.wakes.get()).isEqualTo(1);
        assertThat(flag(Doorbell.file(dir.toString(), 11))).isEqualTo(Doorbell.AWAKE);
        d.arm();
        d.sleep(TimeUnit.MILLISECONDS.toNanos(1));
        assertThat(d.timeouts.get()).as("the stray datagrams were drained with the first wake").isEqualTo(1);
    }

    /** The agents' idle strategy arms before it sleeps: one more duty cycle runs between the flag and the sleep. */
    @Test
    void theIdleStrategyArmsThenSleepsAndWorkDisarms() throws Exception {
        Doorbell d = doorbell();
        d.register(3);
        Path f = Doorbell.file(dir.toString(), 3);
        SpinThenParkIdleStrategy s = new SpinThenParkIdleStrategy(0, LONG_SLEEP_NS, d, () -> false);
        s.idle(0);
        assertThat(flag(f)).as("armed, not asleep yet").isEqualTo(Doorbell.ASLEEP);
        assertThat(d.wakes.get() + d.timeouts.get()).isZero();
        s.idle(1);
        assertThat(flag(f)).as("work disarms").isEqualTo(Doorbell.AWAKE);
        s.idle(0);
        CompletableFuture<Void> sleeper = CompletableFuture.runAsync(() -> s.idle(0));
        await().atMost(Duration.ofSeconds(10)).until(() -> flag(f) == Doorbell.ASLEEP);
        new Doorbell.Target(dir.toString(), 3).ring();
        sleeper.get(20, TimeUnit.SECONDS);
        assertThat(d.localWakes.get()).as("a ring from this process: a selector wake-up").isEqualTo(1);
    }

    @Test
    void theSettingIsValidatedAndOffMeansNoDoorbell() {
        assertThatThrownBy(() -> new AeronTransportProvider().create(TransportConfig.builder().name("bad")
                .property(AeronSettings.DOORBELL, "sometimes").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining(AeronSettings.DOORBELL);
        AeronConnectionManager off = manager("bell-off", false);
        assertThat(off.settings().toString()).contains("doorbell=false");
        assertThat(off.counters()).doesNotContainKey("doorbellWakes");
    }

    private AeronConnectionManager manager(String name, boolean bell) {
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig
                .builder().name(name).defaultTimeout(T).property(AeronSettings.CALLER_POLL_MICROS, "0")
                .property(AeronSettings.DOORBELL, Boolean.toString(bell)).build());
        closeables.add(0, m);
        return m;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(size);
        closeables.add(b);
        return b;
    }

    /**
     * Two managers on one driver (IPC), rings forced through datagrams as between processes: each round waits until
     * the receiving agent sleeps on its doorbell, then sends; the posted receive completes with every byte intact,
     * and the sender's counter shows the rings.
     */
    @ParameterizedTest
    @ValueSource(longs = {64, 200_000})
    void aMessageToASleepingAgentArrivesAfterARing(long size) throws Exception {
        Doorbell.datagramsOnly = true;
        AeronConnectionManager a = manager("bell-a", true);
        AeronConnectionManager b = manager("bell-b", true);
        assertThat(b.ipcStream()).as("IPC between managers of one driver").isNotZero();
        Path bFlag = Doorbell.file(b.runtime.directory(), b.ipcStream());
        Connection toB = a.connection(b.localAddress());
        Connection fromA = b.connection(a.localAddress());
        OffHeapBuffer out = buffer(size);
        OffHeapBuffer in = buffer(size);
        int rounds = 5;
        for (int r = 0; r < rounds; r++) {
            long seed = 977L * r + size;
            TestPattern.fill(out, 0, size, seed);
            TestPattern.clear(in, 0, size);
            CompletableFuture<TransportException> done = new CompletableFuture<>();
            RecvCompletion c = done::complete;
            assertThat(fromA.recvAsync(9100 + r, in, 0, size, T, c)).as("posted").isTrue();
            await().atMost(Duration.ofSeconds(10)).until(() -> flag(bFlag) == Doorbell.ASLEEP);
            toB.send(9100 + r, out, 0, size, T);
            assertThat(done.get(T.toSeconds(), TimeUnit.SECONDS)).as("receive %d completed", r).isNull();
            TestPattern.assertPattern(in, 0, size, seed);
        }
        assertThat(a.counters().get("doorbellRings")).as("rings sent while the agent slept").isPositive();
        assertThat(b.counters().get("doorbellWakes")).as("sleeps ended by a ring's datagram").isPositive();
        assertThat(a.errorCount() + b.errorCount()).isZero();
    }
}
