package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@link RankRendezvous} over loopback: ranks that are threads, as the processes of one instance would be. */
@Timeout(60)
@ExtendWith(LeakCheckExtension.class)
class RankRendezvousTest {
    private static final Duration T = Duration.ofSeconds(20);
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool();

    @AfterEach
    void tearDown() {
        managers.forEach(ConnectionManager::close);
        pool.shutdownNow();
    }

    private ConnectionManager manager(String fabric, String name) {
        ConnectionManager cm = new LoopbackTransportProvider().create(TransportConfig.builder().name(name)
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
        managers.add(cm);
        return cm;
    }

    @Test
    void v01_everyRankLearnsEveryAddressAndTheLeadersKeyThenTheGroupsWork() throws Exception {
        int n = 3;
        List<ConnectionManager> cms = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            cms.add(manager("rv1", "rank-" + r));
        }
        ConnectionManager stranger = manager("rv1", "stranger");
        byte[] key = {1, 2, 3, 4, 5};
        Future<RankRendezvous.Joined> leader = pool.submit(() -> RankRendezvous.lead(cms.get(0), "ctx", n, key, T));
        // A JOIN for another instance and one naming another's address are refused; the leader keeps waiting.
        Future<?> wrong = pool.submit(() -> RankRendezvous.join(stranger, "other", 1, n, cms.get(0).localAddress(),
                Duration.ofMillis(300)));
        List<Future<RankRendezvous.Joined>> joins = new ArrayList<>();
        for (int r = n - 1; r >= 1; r--) {
            int rank = r;
            joins.add(pool.submit(() -> RankRendezvous.join(cms.get(rank), "ctx", rank, n, cms.get(0).localAddress(),
                    T)));
        }
        List<String> expected = cms.stream().map(ConnectionManager::localAddress).toList();
        RankRendezvous.Joined l = leader.get(T.toSeconds(), TimeUnit.SECONDS);
        assertThat(l.addresses()).isEqualTo(expected);
        for (Future<RankRendezvous.Joined> j : joins) {
            RankRendezvous.Joined got = j.get(T.toSeconds(), TimeUnit.SECONDS);
            assertThat(got.addresses()).isEqualTo(expected);
            assertThat(got.sharedKey()).isEqualTo(key);
        }
        assertThatThrownBy(() -> wrong.get(T.toSeconds(), TimeUnit.SECONDS)).hasMessageContaining("no welcome");
        // The addresses are what TransportGroups needs: a round over the instance's generation group.
        List<Future<List<long[]>>> rounds = new ArrayList<>();
        List<TransportGroupComm> groups = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            groups.add(TransportGroupComm.join(cms.get(r), expected, r, 9, TransportGroups.GENERATION_CHANNEL));
        }
        for (TransportGroupComm g : groups) {
            rounds.add(pool.submit(() -> g.allgather(new long[] {g.rank()}, T)));
        }
        for (Future<List<long[]>> f : rounds) {
            assertThat(f.get(T.toSeconds(), TimeUnit.SECONDS)).hasSize(n);
        }
        groups.forEach(TransportGroupComm::close);
    }

    @Test
    void v02_theLeaderNamesTheRanksThatNeverJoined() throws Exception {
        ConnectionManager lead = manager("rv2", "rank-0");
        ConnectionManager one = manager("rv2", "rank-1");
        Future<RankRendezvous.Joined> leader = pool.submit(() -> RankRendezvous.lead(lead, "ctx", 3, new byte[4],
                Duration.ofMillis(500)));
        pool.submit(() -> RankRendezvous.join(one, "ctx", 1, 3, lead.localAddress(), Duration.ofMillis(500)));
        assertThatThrownBy(() -> leader.get(T.toSeconds(), TimeUnit.SECONDS)).cause()
                .isInstanceOfSatisfying(KvTransferException.class, e -> {
                    assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT);
                    assertThat(e.getMessage()).contains("ranks [2] did not join");
                });
    }
}
