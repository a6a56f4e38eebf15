package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.sync.GroupComm;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

@Timeout(30)
class InProcessGroupTest {
    @Test
    void everyMemberGetsEveryArrayInRankOrderRoundAfterRound() throws Exception {
        InProcessGroup g = new InProcessGroup(3);
        ExecutorService ex = Executors.newFixedThreadPool(3);
        try {
            for (int round = 0; round < 20; round++) {
                List<Future<List<long[]>>> fs = new ArrayList<>();
                for (int r = 0; r < 3; r++) {
                    GroupComm m = g.member(r);
                    long[] mine = new long[r + 1];
                    for (int i = 0; i <= r; i++) {
                        mine[i] = round * 100L + r;
                    }
                    fs.add(ex.submit(() -> m.allgather(mine, Duration.ofSeconds(10))));
                }
                for (Future<List<long[]>> f : fs) {
                    List<long[]> all = f.get(10, TimeUnit.SECONDS);
                    assertThat(all).hasSize(3);
                    for (int r = 0; r < 3; r++) {
                        assertThat(all.get(r)).hasSize(r + 1).containsOnly(round * 100L + r);
                    }
                }
            }
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void aMissingMemberMakesTheOthersTimeOutAndTheGroupStaysUsable() throws Exception {
        InProcessGroup g = new InProcessGroup(2);
        assertThatThrownBy(() -> g.member(0).allgather(new long[] {1}, Duration.ofMillis(100)))
                .isInstanceOf(KvTransferException.class)
                .satisfies(e -> assertThat(((KvTransferException) e).code()).isEqualTo(ErrorCode.TIMEOUT))
                .hasMessageContaining("1 of 2 members did not arrive");
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try {
            Future<List<long[]>> other = ex.submit(() -> g.member(1).allgather(new long[] {2}, Duration.ofSeconds(10)));
            List<long[]> mine = g.member(0).allgather(new long[] {3}, Duration.ofSeconds(10));
            assertThat(mine.get(0)).containsExactly(3);
            assertThat(mine.get(1)).containsExactly(2);
            assertThat(other.get(10, TimeUnit.SECONDS).get(0)).containsExactly(3);
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void aMemberLeavingWakesTheWaitingOnesWithPeerLost() throws Exception {
        InProcessGroup g = new InProcessGroup(2);
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try {
            Future<?> waiting = ex.submit(() -> g.member(0).allgather(new long[0], Duration.ofSeconds(20)));
            await().atMost(Duration.ofSeconds(10)).until(() -> g.toString().contains("deposits=1"));
            g.member(1).close();
            assertThatThrownBy(() -> waiting.get(10, TimeUnit.SECONDS)).hasCauseInstanceOf(KvTransferException.class)
                    .hasMessageContaining("PEER_LOST");
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void localGroupIsItself() {
        try (LocalGroupComm c = new LocalGroupComm()) {
            assertThat(c.size()).isEqualTo(1);
            assertThat(c.allgather(new long[] {7, 8}, Duration.ZERO).get(0)).containsExactly(7, 8);
        }
    }
}
