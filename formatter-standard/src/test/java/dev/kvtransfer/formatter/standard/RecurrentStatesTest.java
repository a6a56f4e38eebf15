package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.cache.RecurrentStatePool;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The recurrent-state runs on transport-free sessions: which messages each rank sends (straight from its state
 * memory), and the staged path a transport that cannot take the state's memory gets, byte for byte the same.
 */
class RecurrentStatesTest {
    private static final long REQUEST = 42;
    private static final RecurrentStateShape SHAPE = new RecurrentStateShape(RecurrentStateShape.kinds("AAAR", 2),
            List.of(), 8, 3, 4, 2, 4, DataType.FLOAT16, DataType.FLOAT32);

    private final HostBufferManager memory = new HostBufferManager();
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        memory.close();
    }

    private static CacheState state(int tp, int pp) {
        return CacheState.builder().uniformKvHeads(6, 4).sizePerHead(4).tokensPerBlock(8).tensorParallelism(tp)
                .pipelineParallelism(pp).recurrentState(SHAPE).build();
    }

    private RecurrentStatePool pool(CacheState s, int rank, long pattern) {
        RecurrentStatePool p = new RecurrentStatePool(memory, MemoryKind.HOST, s, rank);
        open.add(p);
        p.allocate(REQUEST);
        KvPattern.fillRecurrent(p, s, rank, REQUEST, pattern);
        return p;
    }

    private CapturingSession session(boolean sender, CacheState self, int index, CacheState peer,
                                     List<List<CapturingSession.Message>> deliveries) {
        CapturingSession s = new CapturingSession(REQUEST, sender, self, index, peer, new int[0], 0, memory,
                deliveries);
        open.add(s);
        return s;
    }

    /** The same session, for a transport that takes no memory of the state's kind: the runs go through staging. */
    private static TransferSession staged(TransferSession s) {
        return new ForwardingSession(s) {
            @Override
            public boolean transportAccepts(MemoryKind kind) {
                return false;
            }
        };
    }

    @Test
    void tp2ToTp1SendsEachRanksChannelsAndHeadsPerLayerStraightFromItsStates() {
        CacheState ctx = state(2, 1);
        CacheState gen = state(1, 1);
        List<List<CapturingSession.Message>> deliveries = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            RecurrentStatePool states = pool(ctx, c, REQUEST);
            CapturingSession s = session(true, ctx, c, gen, null);
            RecurrentStates.send(s, states);
            List<CapturingSession.Message> sent = s.perPeer.get(0);
            // Two recurrent layers, each its 4 of 8 conv channels (x 3 FP16) then its 2 of 4 heads (2 x 4 FP32).
            assertThat(sent).extracting(CapturingSession.Message::length).containsExactly(24L, 64L, 24L, 64L);
            assertThat(sent.get(2).source().address()).as("zero copy from the state")
                    .isEqualTo(states.convState(REQUEST, 1).address());
            assertThat(s.staging).isEmpty();
            deliveries.add(sent);
        }
        RecurrentStatePool got = pool(gen, 0, REQUEST + 1000);
        CapturingSession r = session(false, gen, 0, ctx, deliveries);
        RecurrentStates.receive(r, got);
        assertThat(r.received(0)).isEqualTo(4);
        assertThat(r.received(1)).isEqualTo(4);
        assertThat(KvPattern.verifyRecurrent(got, gen, 0, REQUEST).assertOk().checkedElements())
                .isEqualTo(2L * (8 * 3 + 4 * 2 * 4));
    }

    @Test
    void aTransportThatCannotTakeTheStateMemoryGetsTheSameBytesThroughStaging() {
        CacheState ctx = state(1, 2);
        CacheState gen = state(2, 1);
        // Generation TP rank 1 (PP1) takes layer 0 from context PP rank 0 and layer 1 from PP rank 1.
        List<List<CapturingSession.Message>> deliveries = new ArrayList<>();
        for (int c = 0; c < 2; c++) {
            RecurrentStatePool states = pool(ctx, c, REQUEST);
            CapturingSession s = session(true, ctx, c, gen, null);
            RecurrentStates.send(staged(s), states);
            int pos = s.targets().peerRanks().indexOf(1);
            assertThat(s.perPeer.get(pos)).extracting(CapturingSession.Message::length).containsExactly(24L, 64L);
            assertThat(s.staging).as("one staging buffer per peer").hasSize(2);
            deliveries.add(s.perPeer.get(pos));
        }
        RecurrentStatePool got = pool(gen, 1, REQUEST + 1000);
        CapturingSession r = session(false, gen, 1, ctx, deliveries);
        assertThat(r.targets().peerRanks()).containsExactly(0, 1);
        RecurrentStates.receive(staged(r), got);
        assertThat(r.staging).hasSize(2);
        KvPattern.verifyRecurrent(got, gen, 1, REQUEST).assertOk();
    }
}
