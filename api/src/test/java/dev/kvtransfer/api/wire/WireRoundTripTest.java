package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Tags;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;

import java.util.Collections;
import java.util.List;
import java.util.Optional;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Round trips of random valid model objects through their whole-message encoding (jqwik). Each property
 * checks: decode(encode(x)) equals x (including the describing rank's selfIndex, which CommState equality
 * ignores), encoding is deterministic, and the re-encoded decode is byte-identical.
 */
class WireRoundTripTest {

    // ---- generators -------------------------------------------------------------------------------------

    @Provide
    Arbitrary<CacheState> cacheStates() {
        Arbitrary<Integer> tpLog = Arbitraries.integers().between(0, 3);
        Arbitrary<Integer> pp = Arbitraries.integers().between(1, 4);
        Arbitrary<Integer> cpLog = Arbitraries.integers().between(0, 2);
        Arbitrary<Boolean> mla = Arbitraries.of(false, true);
        Arbitrary<Integer> dpLog = Arbitraries.integers().between(-1, 3); // -1: attention DP off
        Arbitrary<Integer> layers = Arbitraries.integers().between(1, 24);
        Arbitrary<DataType> dataType = Arbitraries.of(DataType.class);
        Arbitrary<Boolean> reuse = Arbitraries.of(false, true);
        return Combinators.combine(tpLog, pp, cpLog, mla, dpLog, layers, dataType, reuse)
                .flatAs((tl, p, cl, m, dl, l, dt, re) -> {
                    int tp = 1 << tl;
                    int dpSize = dl < 0 ? 0 : tp >> Math.min(dl, tl);
                    Arbitrary<List<Integer>> heads = m
                            ? Arbitraries.just(Collections.nCopies(l, 1))
                            : Arbitraries.oneOf(
                                    Arbitraries.integers().between(0, 5).map(x -> Collections.nCopies(l, 1 << x)),
                                    Arbitraries.integers().between(0, 5).map(x -> 1 << x).list().ofSize(l));
                    Arbitrary<Integer> dpRank = dpSize == 0
                            ? Arbitraries.just(0)
                            : Arbitraries.integers().between(0, dpSize - 1);
                    Arbitrary<Optional<List<Integer>>> split = Arbitraries.integers().between(0, l).list()
                            .ofSize(p - 1).map(cuts -> Samples.splitAt(cuts, l)).optional();
                    Arbitrary<Integer> sizePerHead = Arbitraries.integers().between(1, CacheState.MAX_DIM);
                    Arbitrary<Integer> tokensPerBlock = Arbitraries.integers().between(1, 1024);
                    Arbitrary<Boolean> kOnly = m ? Arbitraries.just(true) : Arbitraries.of(false, true);
                    return Combinators.combine(heads, dpRank, split, sizePerHead, tokensPerBlock, kOnly)
                            .as((h, dr, sp, d, t, k) -> {
                                CacheState.Builder b = CacheState.builder()
                                        .kvHeadsPerLayer(h).sizePerHead(d).tokensPerBlock(t)
                                        .tensorParallelism(tp).pipelineParallelism(p).contextParallelism(1 << cl)
                                        .dataType(dt).blockReuse(re).kvFactor(k ? 1 : 2)
                                        .attentionType(m ? AttentionType.MLA : AttentionType.DEFAULT);
                                if (dpSize > 0) {
                                    b.attentionDp(true, dr, dpSize);
                                }
                                sp.ifPresent(b::attentionLayersPerPp);
                                if (m && (d & 1) == 1) {
                                    // Some MLA states declare an indexer-K pool (format version 3).
                                    b.indexerKCache(1 + (t % 256), (d & 2) == 0 ? 0 : 128);
                                }
                                // Some states with block reuse reuse partial blocks too (format version 4).
                                b.partialReuse(re && (t & 1) == 1);
                                return b.build();
                            });
                });
    }

    private static Arbitrary<String> strings(int maxLength) {
        // ASCII, Latin-1, CJK and punctuation; every char has a UTF-8 form (no lone surrogates).
        return Arbitraries.strings().withCharRange(' ', '~').withCharRange('\u00a0', '\u00ff')
                .withCharRange('\u4e00', '\u4e40').ofMaxLength(maxLength);
    }

    private static Arbitrary<CommState> commStates(int ranks) {
        return Combinators.combine(strings(16), strings(48).list().ofSize(ranks),
                        Arbitraries.integers().between(-1, ranks - 1))
                .as(CommState::new);
    }

    @Provide
    Arbitrary<CommState> commStates() {
        return Arbitraries.integers().between(0, 64).flatMap(WireRoundTripTest::commStates);
    }

    @Provide
    Arbitrary<TransceiverState> transceiverStates() {
        return cacheStates().flatMap(c -> commStates(c.worldSize()).map(m -> new TransceiverState(c, m)));
    }

    private Arbitrary<long[]> longArrays(int max) {
        return Arbitraries.longs().array(long[].class).ofMaxSize(max);
    }

    @Provide
    Arbitrary<RequestInfo> requestInfos() {
        return Combinators.combine(Arbitraries.longs(), Arbitraries.integers().between(-1, Integer.MAX_VALUE),
                        longArrays(32), transceiverStates(),
                        Arbitraries.integers().between(Tags.FIRST_DATA_TAG, Integer.MAX_VALUE),
                        Arbitraries.longs().between(0, Long.MAX_VALUE))
                .as(RequestInfo::new);
    }

    @Provide
    Arbitrary<ContextPhaseParams> contextPhaseParams() {
        return Combinators.combine(Arbitraries.longs(), longArrays(16), transceiverStates(), longArrays(8))
                .as((id, tokens, state, draft) -> new ContextPhaseParams(id, tokens, state, new byte[0], draft));
    }

    // ---- properties -------------------------------------------------------------------------------------

    /** The documented size: header 6 + tag 1 + fixed fields 61 + 4 per layer + 4 per PP rank. */
    @Property(tries = 500)
    void cacheStateRoundTrips(@ForAll("cacheStates") CacheState s) {
        byte[] bytes = s.toBytes();
        assertThat(bytes).hasSize(68 + 4 * s.numLayers() + 4 * s.pipelineParallelism());
        CacheState back = CacheState.fromBytes(bytes);
        assertThat(back).isEqualTo(s).hasSameHashCodeAs(s);
        assertThat(back.toBytes()).isEqualTo(bytes).isEqualTo(s.toBytes());
    }

    @Property(tries = 500)
    void commStateRoundTrips(@ForAll("commStates") CommState s) {
        byte[] bytes = s.toBytes();
        CommState back = CommState.fromBytes(bytes);
        assertThat(back).isEqualTo(s);
        assertThat(back.selfIndex()).isEqualTo(s.selfIndex());
        assertThat(back.toBytes()).isEqualTo(bytes);
    }

    @Property(tries = 300)
    void transceiverStateRoundTrips(@ForAll("transceiverStates") TransceiverState s) {
        byte[] bytes = s.toBytes();
        TransceiverState back = TransceiverState.fromBytes(bytes);
        assertThat(back).isEqualTo(s);
        assertThat(back.selfIndex()).isEqualTo(s.selfIndex());
        assertThat(back.toBytes()).isEqualTo(bytes);
    }

    @Property(tries = 300)
    void requestInfoRoundTrips(@ForAll("requestInfos") RequestInfo info) {
        byte[] bytes = info.toBytes();
        RequestInfo back = RequestInfo.fromBytes(bytes);
        assertThat(back).isEqualTo(info).hasSameHashCodeAs(info);
        assertThat(back.lastBlockKey()).containsExactly(info.lastBlockKey());
        assertThat(back.toBytes()).isEqualTo(bytes);
    }

    @Property(tries = 300)
    void contextPhaseParamsRoundTrip(@ForAll("contextPhaseParams") ContextPhaseParams p) {
        byte[] bytes = p.toBytes();
        ContextPhaseParams back = ContextPhaseParams.fromBytes(bytes);
        assertThat(back).isEqualTo(p).hasSameHashCodeAs(p);
        assertThat(back.firstGenTokens()).containsExactly(p.firstGenTokens());
        assertThat(back.draftTokens()).containsExactly(p.draftTokens());
        assertThat(back.toBytes()).isEqualTo(bytes);
    }

    /** writeTo / readFrom compose: two objects back to back in one raw buffer read back in order. */
    @Property(tries = 200)
    void embeddedEncodingsComposeWithoutAHeader(@ForAll("requestInfos") RequestInfo info,
                                                @ForAll("cacheStates") CacheState s) {
        WireWriter w = WireWriter.raw();
        info.writeTo(w);
        s.writeTo(w);
        WireReader r = WireReader.raw(w.toByteArray());
        assertThat(RequestInfo.readFrom(r)).isEqualTo(info);
        assertThat(CacheState.readFrom(r)).isEqualTo(s);
        r.expectEnd("two messages");
        assertThat(r.offset()).isEqualTo(w.size());
    }
}
