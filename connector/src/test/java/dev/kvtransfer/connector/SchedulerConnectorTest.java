package dev.kvtransfer.connector;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.RequestState;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The scheduler side alone (no transceiver): what it offers, what it schedules once, and who owns the blocks when.
 */
class SchedulerConnectorTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4)
            .tokensPerBlock(8).tensorParallelism(2).build();
    private static final TransceiverState CTX = new TransceiverState(STATE,
            new CommState("loopback", List.of("a", "b"), 0));

    private static ContextPhaseParams params(long id, long[] tokens) {
        return new ContextPhaseParams(id, tokens, CTX);
    }

    private static SchedulerConnector consumer() {
        return new SchedulerConnector(ConnectorConfig.of(KvRole.CONSUMER, STATE), null);
    }

    private static SchedulerConnector producer() {
        return new SchedulerConnector(ConnectorConfig.of(KvRole.PRODUCER, STATE), SchedulerConnectorTest::params);
    }

    private static FinishedTransfer ended(long id, KvTransferException error) {
        return new FinishedTransfer(id, id, error == null ? RequestState.CONTEXT_COMPLETE : RequestState.TRANS_ERROR,
                error == null ? 64 : 0, 1, Optional.empty(), error);
    }

    @Test
    void offersThePromptBeyondTheWholeBlocksOfTheLocalPrefix() {
        SchedulerConnector s = consumer();
        ConnectorRequest q = ConnectorRequest.decode(7, 30, new long[]{1, 2, 3}, params(70, new long[0]));
        // 13 tokens cached = 1 whole block + 5 tokens: the whole rest is offered, the partial block is loaded whole.
        assertThat(s.getNumNewMatchedTokens(q, 13)).isEqualTo(new MatchResult(17, true));
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{4, 5, 6, 9}), 17);
        ConnectorMetadata meta = s.buildConnectorMeta();
        assertThat(meta.loads()).hasSize(1);
        ConnectorMetadata.LoadSpec l = meta.loads().get(0);
        assertThat(l.reusedBlocks()).isEqualTo(1);
        assertThat(l.reusedHashes()).containsExactly(1);
        assertThat(l.params().requestId()).isEqualTo(70);
        assertThat(s.buildConnectorMeta().isEmpty()).as("each load is in exactly one step").isTrue();

        assertThat(s.getNumNewMatchedTokens(ConnectorRequest.local(8, 30), 0)).isEqualTo(MatchResult.NONE);
        assertThat(s.getNumNewMatchedTokens(ConnectorRequest.decode(9, 16, new long[0], params(90, new long[0])), 16))
                .as("fully cached").isEqualTo(MatchResult.NONE);
        assertThat(producer().getNumNewMatchedTokens(q, 0)).as("a producer loads nothing").isEqualTo(MatchResult.NONE);
    }

    @Test
    void refusesWhatTheEngineGotWrongNamingTheRequest() {
        SchedulerConnector s = consumer();
        ConnectorRequest q = ConnectorRequest.decode(7, 30, new long[]{1}, params(70, new long[0]));
        assertThatThrownBy(() -> s.getNumNewMatchedTokens(q, 31)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("request 7");
        assertThatThrownBy(() -> s.getNumNewMatchedTokens(q, 16)).hasMessageContaining("2 reused blocks but 1");
        assertThat(s.getNumNewMatchedTokens(q, 0).numTokens()).isEqualTo(30);
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{1, 2, 3, 4}), 29))
                .hasMessageContaining("offered 30");
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(3, new int[]{1, 2, 3, 4}), 30))
                .hasMessageContaining("3 ranks for an instance of 2");
    }

    @Test
    void aSavedRequestsBlocksStayTheConnectorsUntilEveryRankReportedItsEnd() {
        SchedulerConnector s = producer();
        ConnectorRequest q = ConnectorRequest.prefill(5, 16, new long[]{11, 12});
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{0, 1}), 0);
        assertThat(s.buildConnectorMeta().saves()).extracting(ConnectorMetadata.SaveSpec::requestId).containsExactly(5L);

        FinishResult fr = s.requestFinished(5, new long[]{42});
        assertThat(fr.delayFree()).isTrue();
        assertThat(fr.kvTransferParams().orElseThrow().firstGenTokens()).containsExactly(42);

        ConnectorUpdate one = s.updateConnectorOutput(List.of(new WorkerOutput(0, List.of(ended(5, null)), List.of(),
                Set.of())));
        assertThat(one.finishedSending()).as("rank 1 has not reported").isEmpty();
        KvTransferException lost = new KvTransferException(ErrorCode.PEER_LOST, 5, "request 5: peer lost", null);
        ConnectorUpdate both = s.updateConnectorOutput(List.of(new WorkerOutput(1, List.of(ended(5, lost)), List.of(),
                Set.of())));
        assertThat(both.finishedSending()).containsExactly(5L);
        assertThat(both.failedSends()).containsOnlyKeys(5L);
        assertThat(s.savesInFlight()).isZero();
    }

    @Test
    void aSaveThatEndedBeforeTheEngineFinishedTheRequestIsFreedAtOnce() {
        SchedulerConnector s = producer();
        s.updateStateAfterAlloc(ConnectorRequest.prefill(5, 8, new long[0]), BlockTable.uniform(2, new int[]{3}), 0);
        s.buildConnectorMeta();
        ConnectorUpdate u = s.updateConnectorOutput(List.of(
                new WorkerOutput(0, List.of(ended(5, null)), List.of(), Set.of()),
                new WorkerOutput(1, List.of(ended(5, null)), List.of(), Set.of())));
        assertThat(u.finishedSending()).as("the engine still runs it: not its to free yet").isEmpty();
        FinishResult fr = s.requestFinished(5);
        assertThat(fr.delayFree()).isFalse();
        assertThat(fr.kvTransferParams()).isPresent();
        assertThat(s.savesInFlight()).isZero();
    }

    @Test
    void aRequestFinishedBeforeItsStepReachedTheWorkersHoldsNothing() {
        SchedulerConnector s = producer();
        s.updateStateAfterAlloc(ConnectorRequest.prefill(5, 8, new long[0]), BlockTable.uniform(2, new int[]{3}), 0);
        assertThat(s.requestFinished(5)).isEqualTo(FinishResult.FREE);
        assertThat(s.buildConnectorMeta().isEmpty()).isTrue();
    }

    @Test
    void aLoadTheEngineDropsIsCancelledAndHeldUntilItsEndIsReported() {
        SchedulerConnector s = new SchedulerConnector(ConnectorConfig.of(KvRole.CONSUMER, STATE)
                .withLoadAsync(false).withLayerLoadTimeout(Duration.ofSeconds(1)), null);
        ConnectorRequest q = ConnectorRequest.decode(7, 8, new long[0], params(70, new long[0]));
        assertThat(s.getNumNewMatchedTokens(q, 0)).isEqualTo(new MatchResult(8, false));
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{2}), 8);
        assertThat(s.buildConnectorMeta().loads().get(0).async()).isFalse();

        assertThat(s.requestFinished(7).delayFree()).isTrue();
        assertThat(s.buildConnectorMeta().cancels()).containsExactly(7L);
        KvTransferException c = new KvTransferException(ErrorCode.CANCELLED, 70, "request 70 cancelled", null);
        ConnectorUpdate u = s.updateConnectorOutput(List.of(
                new WorkerOutput(0, List.of(), List.of(ended(7, c)), Set.of(2)),
                new WorkerOutput(1, List.of(), List.of(ended(7, c)), Set.of(2))));
        assertThat(u.finishedRecving()).containsExactly(7L);
        assertThat(u.failedLoads()).containsOnlyKeys(7L);
        assertThat(u.invalidBlockIds()).containsExactly(2);
        assertThat(s.loadsInFlight()).isZero();
    }

    @Test
    void chunkedPrefillGrowsTheBlocksAndHandsTheSaveOverWithTheLastChunk() {
        SchedulerConnector s = producer();
        ConnectorRequest q = ConnectorRequest.prefill(5, 20, new long[]{11, 12});
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7}), 0, 8);
        assertThat(s.buildConnectorMeta().saves()).as("chunk 1 of 3: nothing to save yet").isEmpty();
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{8, 9}), 0, 16))
                .hasMessageContaining("do not extend the earlier [7]");
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7, 9}), 0, 4))
                .hasMessageContaining("goes back from 8");
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7}), 0, 21))
                .hasMessageContaining("outside [1, 20]");
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7, 9}), 0, 16);
        assertThat(s.buildConnectorMeta().saves()).isEmpty();
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7, 9, 4}), 0, 20);
        ConnectorMetadata meta = s.buildConnectorMeta();
        assertThat(meta.saves()).hasSize(1);
        assertThat(meta.saves().get(0).blocks()).isEqualTo(BlockTable.uniform(2, new int[]{7, 9, 4}));
        assertThatThrownBy(() -> s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{7, 9, 4, 5}), 0, 20))
                .hasMessageContaining("already being saved");
        assertThat(s.hasPendingPushWork()).isTrue();

        // A request finished (aborted) between two chunks: never handed over, nothing held.
        ConnectorRequest r = ConnectorRequest.prefill(6, 20, new long[0]);
        s.updateStateAfterAlloc(r, BlockTable.uniform(2, new int[]{1}), 0, 8);
        assertThat(s.requestFinished(6)).isEqualTo(FinishResult.FREE);
        assertThat(s.buildConnectorMeta().saves()).isEmpty();
    }

    @Test
    void aRequestWhoseParamsHaveNotArrivedIsAskedAboutAgainLater() {
        SchedulerConnector s = consumer();
        ConnectorRequest q = ConnectorRequest.remotePrefill(7, 30, new long[]{1, 2, 3});
        assertThat(q.loadsFromRemote()).isTrue();
        assertThat(s.getNumNewMatchedTokens(q, 8)).isEqualTo(MatchResult.LATER);
        assertThat(MatchResult.LATER.later()).isTrue();
        assertThat(s.getNumNewMatchedTokens(q, 8).numTokens()).isZero();
        s.kvTransferParamsArrived(7, params(70, new long[0]));
        assertThat(s.getNumNewMatchedTokens(q, 8)).isEqualTo(new MatchResult(22, true));
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{4, 5, 6, 9}), 22);
        ConnectorMetadata.LoadSpec l = s.buildConnectorMeta().loads().get(0);
        assertThat(l.params().requestId()).isEqualTo(70);
        assertThat(l.reusedHashes()).containsExactly(1);
        assertThatThrownBy(() -> new MatchResult(3, false, true)).hasMessageContaining("offers no tokens");
    }

    @Test
    void aFailedLoadNamesTheInvalidBlocksOfEachRankAndKeepsTheValidPrefix() {
        for (LoadFailurePolicy policy : LoadFailurePolicy.values()) {
            SchedulerConnector s = new SchedulerConnector(ConnectorConfig.of(KvRole.CONSUMER, STATE)
                    .withLoadFailurePolicy(policy), null);
            ConnectorRequest q = ConnectorRequest.decode(7, 30, new long[]{1, 2, 3}, params(70, new long[0]));
            s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{4, 5, 6, 9}), s.getNumNewMatchedTokens(q, 8)
                    .numTokens());
            s.buildConnectorMeta();
            KvTransferException lost = new KvTransferException(ErrorCode.PEER_LOST, 70, "request 70: lost", null);
            FinishedTransfer bad = new FinishedTransfer(7, 70, RequestState.TRANS_ERROR, 0, 0, Optional.empty(), lost,
                    List.of(5, 6, 9), 1);
            ConnectorUpdate u = s.updateConnectorOutput(List.of(
                    new WorkerOutput(0, List.of(), List.of(new FinishedTransfer(7, 70,
                            RequestState.GENERATION_TRANS_COMPLETE, 96, 3, Optional.empty(), null)), Set.of()),
                    new WorkerOutput(1, List.of(), List.of(bad), Set.of(5, 6, 9))));
            assertThat(u.finishedRecving()).containsExactly(7L);
            LoadFailure f = u.loadFailures().get(7L);
            // TP: rank 1 holds a share of every block, so every loaded block is invalid; the reused one is kept.
            assertThat(f.validBlocks()).isEqualTo(1);
            assertThat(f.validTokens()).isEqualTo(8);
            assertThat(f.invalidBlocks()).containsOnlyKeys(1);
            assertThat(f.invalidBlocks().get(1)).containsExactlyInAnyOrder(5, 6, 9);
            assertThat(f.error()).isSameAs(lost);
            assertThat(f.recompute()).isEqualTo(policy == LoadFailurePolicy.RECOMPUTE);
            assertThat(u.invalidBlockIds()).containsExactlyInAnyOrder(5, 6, 9);
            assertThat(s.takeEvents()).extracting(ConnectorEvent::kind)
                    .containsExactly(ConnectorEvent.Kind.LOAD_FAILED);
        }
    }

    @Test
    void aCompletedLoadIsAnEventNamingTheKeysOfTheBlocksItWrote() {
        SchedulerConnector s = consumer();
        ConnectorRequest q = ConnectorRequest.decode(7, 30, new long[]{1, 2, 3}, params(70, new long[0]));
        s.updateStateAfterAlloc(q, BlockTable.uniform(2, new int[]{4, 5, 6, 9}), s.getNumNewMatchedTokens(q, 8)
                .numTokens());
        s.buildConnectorMeta();
        FinishedTransfer ok = new FinishedTransfer(7, 70, RequestState.GENERATION_TRANS_COMPLETE, 96, 3,
                Optional.empty(), null);
        s.updateConnectorOutput(List.of(new WorkerOutput(0, List.of(), List.of(ok), Set.of()),
                new WorkerOutput(1, List.of(), List.of(ok), Set.of())));
        List<ConnectorEvent> ev = s.takeEvents();
        assertThat(ev).hasSize(1);
        assertThat(ev.get(0).kind()).isEqualTo(ConnectorEvent.Kind.LOADED);
        assertThat(ev.get(0).blockHashes()).as("blocks 1 and 2 (full, not reused); block 3 is partial")
                .containsExactly(2, 3);
        assertThat(ev.get(0).bytes()).isEqualTo(192);
        assertThat(ev.get(0).contextRequestId()).isEqualTo(70);
        assertThat(s.takeEvents()).as("each event once").isEmpty();
        assertThatThrownBy(() -> s.updateConnectorOutput(List.of(new WorkerOutput(2, List.of(), List.of(),
                Set.of())))).hasMessageContaining("rank 2: not a member of [0, 1]");
    }

    @Test
    void aPreemptedTransferIsCancelledAndItsEndNeverHandedToTheEngine() {
        SchedulerConnector s = producer();
        s.updateStateAfterAlloc(ConnectorRequest.prefill(5, 16, new long[0]), BlockTable.uniform(2, new int[]{0, 1}),
                0);
        s.updateStateAfterAlloc(ConnectorRequest.prefill(6, 16, new long[0]), BlockTable.uniform(2, new int[]{2}),
                0, 8);
        s.buildConnectorMeta();
        s.handlePreemptions(Set.of(5L, 6L));
        ConnectorMetadata meta = s.buildConnectorMeta();
        assertThat(meta.preempted()).containsExactly(5L);
        assertThat(meta.cancels()).containsExactly(5L);
        assertThat(s.savesInFlight()).as("6 was never handed over: dropped").isEqualTo(1);
        KvTransferException c = new KvTransferException(ErrorCode.CANCELLED, 5, "request 5 cancelled", null);
        ConnectorUpdate u = s.updateConnectorOutput(List.of(
                new WorkerOutput(0, List.of(ended(5, c)), List.of(), Set.of()),
                new WorkerOutput(1, List.of(ended(5, c)), List.of(), Set.of())));
        assertThat(u.finishedSending()).isEmpty();
        assertThat(s.savesInFlight()).isZero();
        assertThat(s.takeEvents()).extracting(ConnectorEvent::kind).containsExactly(ConnectorEvent.Kind.PREEMPTED,
                ConnectorEvent.Kind.PREEMPTED, ConnectorEvent.Kind.SAVE_FAILED);
    }

    @Test
    void shutdownReturnsWhatTheConnectorTrackedAndRefusesLaterSteps() {
        SchedulerConnector s = producer();
        assertThat(s.getFinishedCount()).isEqualTo(2);
        s.updateStateAfterAlloc(ConnectorRequest.prefill(5, 16, new long[0]), BlockTable.uniform(2, new int[]{0, 1}),
                0);
        s.buildConnectorMeta();
        assertThat(s.hasPendingPushWork()).isTrue();
        assertThat(s.shutdown()).containsExactly(5L);
        assertThat(s.hasPendingPushWork()).isFalse();
        assertThatThrownBy(s::buildConnectorMeta).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("shut down");
    }

    @Test
    void attentionDpConfigsCoverTheirDpGroupOnly() {
        CacheState dp = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4).tokensPerBlock(8)
                .tensorParallelism(4).pipelineParallelism(2).attentionDp(true, 0, 2).build();
        assertThatThrownBy(() -> ConnectorConfig.of(KvRole.CONSUMER, dp)).hasMessageContaining("attention DP");
        ConnectorConfig c = ConnectorConfig.of(KvRole.CONSUMER, dp, 1);
        // TP ranks 2, 3 of each PP stage (tpPerDpGroup = 2): instance ranks 2, 3, 6, 7.
        assertThat(c.members()).containsExactly(2, 3, 6, 7);
        assertThat(c.ranks()).isEqualTo(4);
        assertThat(c.dpRank()).isEqualTo(1);
        assertThat(c.memberIndex(6)).isEqualTo(2);
        assertThat(c.memberIndex(0)).isEqualTo(-1);
        assertThatThrownBy(() -> ConnectorConfig.of(KvRole.CONSUMER, dp, 2)).hasMessageContaining("outside [0, 2)");
        assertThatThrownBy(() -> ConnectorConfig.of(KvRole.CONSUMER, STATE, 1)).hasMessageContaining("must be 0");
        assertThat(new SchedulerConnector(c, null).getFinishedCount()).isEqualTo(4);
    }
}
