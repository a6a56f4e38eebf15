package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link TransportGroupComm} over the loopback transport: N members that are threads of this JVM, each with its own
 * manager, as the ranks of one instance in N processes would be.
 */
@Timeout(60)
@ExtendWith(LeakCheckExtension.class)
class TransportGroupCommTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final AtomicInteger FABRICS = new AtomicInteger();

    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<TransportGroupComm> comms = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool();

    @AfterEach
    void tearDown() {
        comms.forEach(TransportGroupComm::close);
        managers.forEach(ConnectionManager::close);
        pool.shutdownNow();
    }

    /** n managers on a fresh fabric and one comm per manager on channel 0. */
    private List<TransportGroupComm> group(int n) {
        String fabric = "group-" + FABRICS.incrementAndGet();
        List<String> addresses = new ArrayList<>();
        int first = managers.size();
        for (int r = 0; r < n; r++) {
            ConnectionManager cm = new LoopbackTransportProvider().create(TransportConfig.builder()
                    .name("member-" + r).property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
            managers.add(cm);
            addresses.add(cm.localAddress());
        }
        List<TransportGroupComm> out = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            TransportGroupComm c = TransportGroupComm.join(managers.get(first + r), addresses, r, 42, 0);
            comms.add(c);
            out.add(c);
        }
        return out;
    }

    private static long[] contribution(int round, int rank) {
        // Round 3 carries more than one chunk per member, so chunking and resumption are exercised.
        int n = round == 3 ? TransportGroupComm.CHUNK_VALUES * 2 + 17 + rank : (round + rank) % 5;
        long[] v = new long[n];
        for (int i = 0; i < n; i++) {
            v[i] = ((long) round << 40) | ((long) rank << 32) | i;
        }
        return v;
    }

    @Test
    void r01_everyMemberGetsEveryArrayInRankOrderRoundAfterRound() throws Exception {
        int n = 4;
        List<TransportGroupComm> g = group(n);
        List<Future<?>> fs = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            TransportGroupComm m = g.get(r);
            fs.add(pool.submit(() -> {
                for (int round = 0; round < 25; round++) {
                    List<long[]> all = m.allgather(contribution(round, m.rank()), T);
                    assertThat(all).hasSize(n);
                    for (int k = 0; k < n; k++) {
                        assertThat(all.get(k)).as("round %d, member %d's array", round, k)
                                .isEqualTo(contribution(round, k));
                    }
                }
                return null;
            }));
        }
        for (Future<?> f : fs) {
            f.get(T.toSeconds(), TimeUnit.SECONDS);
        }
    }

    @Test
    void r02_aMemberThatNeverArrivesIsNamedInTheTimeout() {
        List<TransportGroupComm> g = group(3);
        // Members 0 and 1 gather; member 2 is up (its manager listens) but never calls.
        Future<Throwable> other = pool.submit(() -> catching(() -> g.get(1).allgather(new long[] {1},
                Duration.ofMillis(300))));
        Throwable e = catching(() -> g.get(0).allgather(new long[] {0}, Duration.ofMillis(300)));
        assertThat(e).isInstanceOfSatisfying(KvTransferException.class, k -> {
            assertThat(k.code()).isEqualTo(ErrorCode.TIMEOUT);
            assertThat(k.getMessage()).contains("1 of 3 members did not arrive")
                    .contains("member 2 (" + g.get(2).addresses().get(2) + ")").doesNotContain("member 1 (");
        });
        assertThat(getQuietly(other)).isInstanceOfSatisfying(KvTransferException.class,
                k -> assertThat(k.getMessage()).contains("member 2 (").doesNotContain("member 0 ("));
    }

    @Test
    void r03_aTimedOutRoundIsFinishedByTheNextCallSoMembersStayInStep() throws Exception {
        // As MpiGroupComm's g03: member 0 calls alone and times out; member 1 arrives later. Member 0's next call
        // finishes that round first; member 1's first round carries member 0's early values, its second the new.
        List<TransportGroupComm> g = group(2);
        assertThatThrownBy(() -> g.get(0).allgather(new long[] {-1}, Duration.ofMillis(100)))
                .isInstanceOfSatisfying(KvTransferException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        Future<List<List<long[]>>> late = pool.submit(() -> List.of(g.get(1).allgather(new long[] {1}, T),
                g.get(1).allgather(new long[] {11}, T)));
        List<long[]> second = g.get(0).allgather(new long[] {-2}, T);
        assertThat(second.get(0)).containsExactly(-2);
        assertThat(second.get(1)).containsExactly(11);
        List<List<long[]>> seen = late.get(T.toSeconds(), TimeUnit.SECONDS);
        assertThat(seen.get(0).get(0)).containsExactly(-1);
        assertThat(seen.get(0).get(1)).containsExactly(1);
        assertThat(seen.get(1).get(0)).containsExactly(-2);
    }

    @Test
    void r04_aMemberThatLeavesFailsTheOthersAtOnceWithPeerLost() throws Exception {
        List<TransportGroupComm> g = group(3);
        // Members 0 and 1 wait with a long deadline; member 2 closes instead of calling.
        Future<Throwable> w0 = pool.submit(() -> catching(() -> g.get(0).allgather(new long[] {0}, T)));
        Future<Throwable> w1 = pool.submit(() -> catching(() -> g.get(1).allgather(new long[] {1}, T)));
        g.get(2).close();
        for (Future<Throwable> w : List.of(w0, w1)) {
            assertThat(w.get(T.toSeconds() / 2, TimeUnit.SECONDS)).isInstanceOfSatisfying(KvTransferException.class,
                    k -> {
                        assertThat(k.code()).isEqualTo(ErrorCode.PEER_LOST);
                        assertThat(k.getMessage()).contains("member 2 (").contains("left the group");
                    });
        }
        // The group stays broken with the first cause.
        assertThatThrownBy(() -> g.get(0).allgather(new long[] {0}, T)).isInstanceOfSatisfying(
                KvTransferException.class, k -> assertThat(k.getMessage()).contains("is broken").contains("member 2"));
        assertThatThrownBy(() -> g.get(2).allgather(new long[] {2}, T)).hasMessageContaining("is closed");
    }

    @Test
    void r05_aMemberWhoseTransportDiesFailsTheOthersWithoutHanging() throws Exception {
        List<TransportGroupComm> g = group(3);
        assertThat(gatherAll(g, new long[] {7})).isTrue();
        // Member 1's manager goes away without a word (a crash, as the transport sees it); its comm never says LEAVE.
        Future<Throwable> w0 = pool.submit(() -> catching(() -> g.get(0).allgather(new long[] {0}, T)));
        Future<Throwable> w2 = pool.submit(() -> catching(() -> g.get(2).allgather(new long[] {2}, T)));
        managers.get(1).close();
        for (Future<Throwable> w : List.of(w0, w2)) {
            assertThat(w.get(T.toSeconds() / 2, TimeUnit.SECONDS)).isInstanceOfSatisfying(KvTransferException.class,
                    k -> {
                        assertThat(k.code()).isEqualTo(ErrorCode.PEER_LOST);
                        assertThat(k.getMessage()).contains("member 1 (" + g.get(0).addresses().get(1) + ")");
                    });
        }
    }

    @Test
    void r10_aMemberFoundDeadWhileSendingStillSendsTheRoundToTheOthers() throws Exception {
        List<TransportGroupComm> g = group(3);
        assertThat(gatherAll(g, new long[] {7})).isTrue();
        // Member 2 sends its round to 0 and 1 and waits for member 0's. Then member 1 dies, and member 0's first
        // send (to member 1) fails. Member 0 must still send its round to member 2, else member 2 waits for member
        // 0 until the deadline instead of finding that member 1 is lost.
        Throwable[] w2 = new Throwable[1];
        Thread t2 = new Thread(() -> w2[0] = catching(() -> g.get(2).allgather(new long[] {2}, T)), "member-2");
        t2.start();
        org.awaitility.Awaitility.await().atMost(T).pollInterval(Duration.ofMillis(1))
                .until(() -> t2.getState() == Thread.State.TIMED_WAITING);
        managers.get(1).close();
        Throwable w0 = pool.submit(() -> catching(() -> g.get(0).allgather(new long[] {0}, T)))
                .get(T.toSeconds() / 2, TimeUnit.SECONDS);
        t2.join(T.toMillis() / 2);
        assertThat(t2.isAlive()).as("member 2 still waits").isFalse();
        for (Throwable w : new Throwable[] {w0, w2[0]}) {
            assertThat(w).isInstanceOfSatisfying(KvTransferException.class, k -> {
                assertThat(k.code()).isEqualTo(ErrorCode.PEER_LOST);
                assertThat(k.getMessage()).contains("member 1 (" + g.get(0).addresses().get(1) + ")");
            });
        }
    }

    @Test
    void r06_hostileHeadersAreRefusedMalformedBeforeAnythingIsAllocated() throws Exception {
        for (int variant = 0; variant < 4; variant++) {
            List<TransportGroupComm> g = group(2);
            ConnectionManager hostile = managers.get(managers.size() - 1); // member 1's own manager, speaking raw
            try (HostBufferManager mem = new HostBufferManager()) {
                MemoryBuffer h = mem.allocate(TransportGroupComm.HEADER_BYTES, MemoryKind.HOST);
                ByteBuffer b = h.asByteBuffer();
                b.putInt(0, TransportGroupComm.MAGIC).putInt(4, TransportGroupComm.KIND_ROUND).putLong(8, 42)
                        .putLong(16, 1).putInt(24, 1).putInt(28, 2).putInt(32, 1).putInt(36, 0);
                String expected;
                switch (variant) {
                    case 0 -> {
                        b.putInt(32, Integer.MAX_VALUE);
                        expected = "announces 2147483647 values";
                    }
                    case 1 -> {
                        b.putInt(32, -5);
                        expected = "announces -5 values";
                    }
                    case 2 -> {
                        b.putLong(8, 43);
                        expected = "a message of group 43";
                    }
                    default -> {
                        b.putLong(16, 7);
                        expected = "round 7 where round 1 was due";
                    }
                }
                hostile.connection(g.get(0).addresses().get(0)).send(TransportGroupComm.FIRST_TAG, h, 0,
                        TransportGroupComm.HEADER_BYTES, T);
                String want = expected;
                assertThatThrownBy(() -> g.get(0).allgather(new long[] {0}, T)).isInstanceOfSatisfying(
                        KvTransferException.class, k -> {
                            assertThat(k.code()).isEqualTo(ErrorCode.MALFORMED);
                            assertThat(k.getMessage()).contains("member 1 (").contains(want);
                        });
                h.close();
            }
        }
    }

    @Test
    void r07_theGroupTagRangeMissesEveryTransceiverTag() throws Exception {
        assertThat(TransportGroupComm.FIRST_TAG + 2 * TransportGroupComm.MAX_CHANNEL + 1)
                .isLessThanOrEqualTo(TransportGroupComm.LAST_TAG).isLessThan(Tags.FIRST_DATA_TAG);
        for (Field f : Tags.class.getFields()) {
            if (Modifier.isStatic(f.getModifiers()) && f.getType() == int.class
                    && !f.getName().equals("FIRST_DATA_TAG")) {
                assertThat(f.getInt(null)).as("Tags.%s", f.getName()).isLessThan(TransportGroupComm.FIRST_TAG);
            }
        }
    }

    @Test
    void r08_twoGroupsOnOneSetOfManagersNeverMix() throws Exception {
        List<TransportGroupComm> a = group(3);
        List<String> addresses = a.get(0).addresses();
        List<TransportGroupComm> b = new ArrayList<>();
        for (int r = 0; r < 3; r++) {
            TransportGroupComm c = TransportGroupComm.join(managers.get(managers.size() - 3 + r), addresses, r, 43, 1);
            comms.add(c);
            b.add(c);
        }
        List<Future<?>> fs = new ArrayList<>();
        for (int r = 0; r < 3; r++) {
            for (List<TransportGroupComm> g : List.of(a, b)) {
                TransportGroupComm m = g.get(r);
                long tag = g == a ? 1000 : 2000;
                fs.add(pool.submit(() -> {
                    for (int round = 0; round < 20; round++) {
                        List<long[]> all = m.allgather(new long[] {tag + round, m.rank()}, T);
                        for (int k = 0; k < 3; k++) {
                            assertThat(all.get(k)).containsExactly(tag + round, k);
                        }
                    }
                    return null;
                }));
            }
        }
        for (Future<?> f : fs) {
            f.get(T.toSeconds(), TimeUnit.SECONDS);
        }
    }

    @Test
    void r09_joinRefusesAnAddressListThatDoesNotNameThisMember() {
        group(2);
        ConnectionManager cm = managers.get(0);
        List<String> addresses = List.of(managers.get(0).localAddress(), managers.get(1).localAddress());
        assertThatThrownBy(() -> TransportGroupComm.join(cm, addresses, 1, 1, 0))
                .hasMessageContaining("is not this member's manager");
        assertThatThrownBy(() -> TransportGroupComm.join(cm, addresses, 0, 1, TransportGroupComm.MAX_CHANNEL + 1))
                .hasMessageContaining("channel");
        assertThatThrownBy(() -> TransportGroupComm.join(cm, List.of(addresses.get(0), addresses.get(0)), 0, 1, 0))
                .hasMessageContaining("appears twice");
    }

    private boolean gatherAll(List<TransportGroupComm> g, long[] v) throws Exception {
        List<Future<List<long[]>>> fs = new ArrayList<>();
        for (TransportGroupComm m : g) {
            fs.add(pool.submit(() -> m.allgather(v, T)));
        }
        for (Future<List<long[]>> f : fs) {
            assertThat(f.get(T.toSeconds(), TimeUnit.SECONDS)).hasSize(g.size());
        }
        return true;
    }

    private static Throwable catching(Runnable r) {
        try {
            r.run();
            return null;
        } catch (Throwable t) {
            return t;
        }
    }

    private static Throwable getQuietly(Future<Throwable> f) {
        try {
            return f.get(T.toSeconds(), TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }
}
