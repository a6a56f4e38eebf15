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
}
