package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalStateException;
import static org.assertj.core.api.Assertions.catchThrowableOfType;
import static org.awaitility.Awaitility.await;

/**
 * What the two sides negotiate per request, end to end over loopback (PP2 on both sides, rank r feeds rank r): the
 * key of the prompt's last block, partial block reuse and the context phase's draft tokens. Each mismatch is
 * refused naming both sides' values before a byte moves, and the next genuine request is served, every element
 * verified.
 */
@ExtendWith(LeakCheckExtension.class)
class NegotiationTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    private static final CacheState REUSE = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(16)
            .tokensPerBlock(8).pipelineParallelism(2).blockReuse(true).build();
    private static final CacheState PARTIAL = REUSE.toBuilder().partialReuse(true).build();
    private static final long POISON = 1L << 40;

    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    @TempDir
    Path dir;
    private final List<Throwable> ctxErrors = new CopyOnWriteArrayList<>();

    private LocalInstance start(String name, CacheState state) {
        return start(name, state, null, true);
    }

    private LocalInstance start(String name, CacheState state, Path secret) {
        return start(name, state, secret, true);
    }

    /**
     * An instance with the given secret file (null: the JVM's own secret), or with authentication off; a context
     * instance's ({@code "ctx"}) background errors are collected.
     */
    private LocalInstance start(String name, CacheState state, Path secret, boolean auth) {
        TransceiverConfig.Builder c = TransceiverConfig.builder().transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(30)).auth(auth);
        if (secret != null) {
            c.authSecretFile(secret);
        }
        LocalInstance.Builder b = LocalInstance.builder(name, state).transport(new LoopbackTransportProvider(),
                dev.kvtransfer.api.transport.TransportConfig.builder().build()).config(c.build()).blocksPerRank(64);
        if (name.equals("ctx")) {
            b.errorHandler(ctxErrors::add);
        }
        LocalInstance i = b.start();
        instances.add(i);
        return i;
    }

    private Path secret() throws IOException {
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        return Files.write(dir.resolve("deployment.key"), b);
    }

    /** One request over both instances, with its prefix hashes and blocks filled on the context side. */
    private static final class Req {
        final long id;
        final int prompt;
        final int blocks;
        final long[] hashes;
        final TransferRequest[] ctx = new TransferRequest[2];
        final TransferRequest[] gen = new TransferRequest[2];
        final int[][] genIds = new int[2][];

        Req(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
            this.id = id;
            this.prompt = prompt;
            this.blocks = BlockDistribution.blocksFor(prompt, REUSE.tokensPerBlock());
            this.hashes = new long[blocks];
            for (int b = 0; b < blocks; b++) {
                hashes[b] = id * 1000 + b;
            }
            for (int r = 0; r < 2; r++) {
                int[] c = ctx.cache(r).allocate(id, blocks);
                KvPattern.fill(ctx.cache(r), c, ctx.cacheState(), r, id, blocks);
                this.ctx[r] = TransferRequest.context(id, prompt, c, hashes);
                genIds[r] = gen.cache(r).allocate(id, blocks);
            }
        }

        /** Generation requests without reuse, from the given params. */
        Req plain(ContextPhaseParams params) {
            for (int r = 0; r < 2; r++) {
                gen[r] = TransferRequest.generation(params, prompt, genIds[r]);
            }
            return this;
        }

        void submit(LocalInstance ctxI, LocalInstance genI) {
            for (int r = 0; r < 2; r++) {
                genI.transceiver(r).requestAndReceiveAsync(gen[r]);
                ctxI.transceiver(r).respondAndSendAsync(ctx[r]);
            }
            await().atMost(BOUND).until(() -> ctx[0].isDone() && ctx[1].isDone() && gen[0].isDone()
                    && gen[1].isDone());
        }

        void verify(LocalInstance genI) {
            for (int r = 0; r < 2; r++) {
                assertThat(gen[r].state()).as("%s", gen[r]).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                assertThat(ctx[r].state()).as("%s", ctx[r]).isEqualTo(RequestState.CONTEXT_COMPLETE);
                KvPattern.verify(genI.cache(r), genIds[r], genI.cacheState(), r, id, blocks).assertOk();
            }
        }

        /** Fills the generation blocks with another request's pattern, to show later that nothing was written. */
        Req poisoned(LocalInstance genI) {
            for (int r = 0; r < 2; r++) {
                KvPattern.fill(genI.cache(r), genIds[r], genI.cacheState(), r, id + POISON, blocks);
            }
            return this;
        }

        /** The generation blocks still hold the poison: not a byte was written. */
        void untouched(LocalInstance genI) {
            for (int r = 0; r < 2; r++) {
                KvPattern.verify(genI.cache(r), genIds[r], genI.cacheState(), r, id + POISON, blocks).assertOk();
            }
        }

        /** Both sides failed with the code, the generation side's error containing every fragment; nothing moved. */
        void refused(ErrorCode code, String... fragments) {
            for (int r = 0; r < 2; r++) {
                for (TransferRequest q : List.of(gen[r], ctx[r])) {
                    assertThat(q.state()).as("%s", q).isEqualTo(RequestState.TRANS_ERROR);
                    KvTransferException e = q.error().orElseThrow();
                    assertThat(e.code()).as("%s", e).isEqualTo(code);
                    assertThat(e.getMessage()).contains(fragments);
                }
                assertThat(gen[r].kvCacheSize()).isZero();
            }
        }

        void free(LocalInstance ctxI, LocalInstance genI) {
            for (int r = 0; r < 2; r++) {
                ctxI.cache(r).free(id);
                genI.cache(r).free(id);
            }
        }
    }

    @Test
    void aDifferentLastBlockKeyIsRefusedNamingTheRequestAndBothKeys() {
        LocalInstance ctx = start("ctx", REUSE);
        LocalInstance gen = start("gen", REUSE);
        // The same prompt under LoRA task 7 on the context side and task 9 on the generation side: other KV.
        Req q = new Req(ctx, gen, 900, 8 * 5 + 3).plain(ctx.contextPhaseParams(900, 0)).poisoned(gen);
        for (int r = 0; r < 2; r++) {
            q.ctx[r].withLastBlockKey(new long[] {1, 7, 4242});
            q.gen[r].withLastBlockKey(new long[] {1, 9, 4242});
        }
        q.submit(ctx, gen);
        q.refused(ErrorCode.UNSUPPORTED_LAYOUT, "request 900", "expects last block key [1, 9, 4242]",
                "computed the request under [1, 7, 4242]", "nothing was sent");
        q.untouched(gen);
        q.free(ctx, gen);

        // A key the engine never set (empty) is a different key too: an undetected mismatch is impossible.
        Req unset = new Req(ctx, gen, 901, 8 * 2).plain(ctx.contextPhaseParams(901, 0));
        long[] longKey = new long[20];
        Arrays.setAll(longKey, i -> 100 + i);
        for (int r = 0; r < 2; r++) {
            unset.ctx[r].withLastBlockKey(longKey);
        }
        unset.submit(ctx, gen);
        unset.refused(ErrorCode.UNSUPPORTED_LAYOUT, "expects last block key []",
                "[100, 101, 102, 103, 104, 105, 106, 107, ...(20 elements)]");
        unset.free(ctx, gen);

        // The responder keeps serving: the same keys on both sides move every element.
        Req ok = new Req(ctx, gen, 902, 8 * 5 + 3).plain(ctx.contextPhaseParams(902, 0));
        for (int r = 0; r < 2; r++) {
            ok.ctx[r].withLastBlockKey(longKey);
            ok.gen[r].withLastBlockKey(longKey.clone());
        }
        ok.submit(ctx, gen);
        ok.verify(gen);
        assertThat(ok.gen[0].lastBlockKey()).containsExactly(longKey);
        ok.free(ctx, gen);
    }

    @Test
    void aKeyIsSetBeforeSubmission() {
        LocalInstance ctx = start("ctx", REUSE);
        LocalInstance gen = start("gen", REUSE);
        Req q = new Req(ctx, gen, 910, 8).plain(ctx.contextPhaseParams(910, 0));
        q.submit(ctx, gen);
        q.verify(gen);
        assertThatIllegalStateException().isThrownBy(() -> q.gen[0].withLastBlockKey(new long[] {1}))
                .withMessageContaining("was submitted");
        assertThatIllegalStateException().isThrownBy(() -> q.ctx[0].withPartialReuse(3))
                .withMessageContaining("context request");
        q.free(ctx, gen);
    }

    /** Generation requests reusing {@code reused} whole blocks, plus {@code partial} tokens of the next one. */
    private static Req reusing(Req q, LocalInstance ctx, LocalInstance gen, int reused, int partial) {
        ContextPhaseParams params = ctx.contextPhaseParams(q.id, 0);
        for (int r = 0; r < 2; r++) {
            // The prefix hit is in place; the partly reused block holds a copy that the transfer overwrites whole
            // (here another request's data, so that only a whole-block write passes the check).
            KvPattern.fill(gen.cache(r), q.genIds[r], gen.cacheState(), r, q.id, q.blocks, 0, reused);
            KvPattern.fill(gen.cache(r), q.genIds[r], gen.cacheState(), r, q.id + 50, q.blocks, reused, reused + 1);
            q.gen[r] = TransferRequest.generation(params, q.prompt, q.genIds[r], reused,
                    Arrays.copyOf(q.hashes, reused));
            if (partial > 0) {
                q.gen[r].withPartialReuse(partial);
            }
        }
        return q;
    }

    @Test
    void partialReuseIsRefusedUnlessBothSidesDeclareIt() {
        LocalInstance ctx = start("ctx", REUSE);
        LocalInstance gen = start("gen", PARTIAL);
        Req q = reusing(new Req(ctx, gen, 920, 8 * 6), ctx, gen, 2, 3);
        q.submit(ctx, gen);
        q.refused(ErrorCode.UNSUPPORTED_LAYOUT, "request 920", "reused part of block 2",
                "generation partialReuse true, context partialReuse false", "nothing was sent");
        for (int r = 0; r < 2; r++) {
            // Nothing was written: the reused prefix and the partly reused block's copy are as they were.
            KvPattern.verify(gen.cache(r), q.genIds[r], PARTIAL, r, q.id, q.blocks, 0, 2).assertOk();
            KvPattern.verify(gen.cache(r), q.genIds[r], PARTIAL, r, q.id + 50, q.blocks, 2, 3).assertOk();
        }
        q.free(ctx, gen);
        // The other way round: a requester whose own state does not declare it is refused as well.
        LocalInstance ctx2 = start("ctx2", PARTIAL);
        LocalInstance gen2 = start("gen2", REUSE);
        Req q2 = reusing(new Req(ctx2, gen2, 921, 8 * 6), ctx2, gen2, 2, 3);
        q2.submit(ctx2, gen2);
        q2.refused(ErrorCode.UNSUPPORTED_LAYOUT, "generation partialReuse false, context partialReuse true");
        q2.free(ctx2, gen2);

        // Both keep serving: a prefix that ends on a block boundary needs no partial reuse.
        Req ok = reusing(new Req(ctx, gen, 922, 8 * 6), ctx, gen, 2, 0);
        ok.submit(ctx, gen);
        ok.verify(gen);
        assertThat(ok.gen[0].kvCacheSize()).isEqualTo((long) (ok.blocks - 2) * gen.cache(0).layout().blockBytes());
        ok.free(ctx, gen);
    }

    @Test
    void aPartlyReusedBlockIsSentWholeWhenBothSidesDeclarePartialReuse() {
        LocalInstance ctx = start("ctx", PARTIAL);
        LocalInstance gen = start("gen", PARTIAL);
        Req q = reusing(new Req(ctx, gen, 930, 8 * 6 + 5), ctx, gen, 3, 5);
        q.submit(ctx, gen);
        q.verify(gen);
        // The two whole reused blocks stayed; the partly reused one came whole, with the rest.
        assertThat(q.gen[0].kvCacheSize()).isEqualTo((long) (q.blocks - 3) * gen.cache(0).layout().blockBytes());
        q.free(ctx, gen);
        // A partial block past the prompt is the requester's error, refused before it asks.
        Req bad = reusing(new Req(ctx, gen, 931, 8 * 2), ctx, gen, 2, 3);
        for (int r = 0; r < 2; r++) {
            gen.transceiver(r).requestAndReceiveAsync(bad.gen[r]);
        }
        await().atMost(BOUND).until(() -> bad.gen[0].isDone() && bad.gen[1].isDone());
        for (int r = 0; r < 2; r++) {
            assertThat(bad.gen[r].error().orElseThrow().code()).isEqualTo(ErrorCode.MALFORMED);
            assertThat(bad.gen[r].error().orElseThrow().getMessage()).contains("partial reuse of 3 tokens of block 2");
            ctx.cache(r).free(bad.id);
            gen.cache(r).free(bad.id);
        }
    }

    @Test
    void draftTokensReachTheGenerationSideExactlyAndAChangedOneIsRefused() {
        LocalInstance ctx = start("ctx", REUSE);
        LocalInstance gen = start("gen", REUSE);
        long[] first = {31_337};
        long[] draft = {5, 6, 7, 8, 9, 10};
        // The router carries the params' bytes; one draft token changes on the way.
        byte[] wire = ctx.transceiver(0).contextPhaseParams(940, first, draft).toBytes();
        byte[] changed = wire.clone();
        changed[changed.length - 4 - 8] ^= 0x40; // in the last draft token
        MalformedMessageException e = catchThrowableOfType(MalformedMessageException.class,
                () -> ContextPhaseParams.fromBytes(changed));
        assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED);
        assertThat(e.getMessage()).contains("tokensChecksum", "recorded "
                + Integer.toHexString(ContextPhaseParams.fromBytes(wire).tokensChecksum()), "6 draft tokens");

        // The genuine params: the transfer moves every element and the generation side holds the exact drafts.
        ContextPhaseParams received = ContextPhaseParams.fromBytes(wire);
        Req q = new Req(ctx, gen, 940, 8 * 4 + 1).plain(received);
        q.submit(ctx, gen);
        q.verify(gen);
        for (int r = 0; r < 2; r++) {
            ContextPhaseParams p = q.gen[r].contextPhaseParams().orElseThrow();
            assertThat(p.draftTokens()).containsExactly(draft);
            assertThat(p.firstGenTokens()).containsExactly(first);
        }
        q.free(ctx, gen);
    }

    /** The params a router could forward: the same request, state and token, other tokens and a fresh CRC. */
    private static ContextPhaseParams routed(ContextPhaseParams real, long[] first, long[] draft) {
        ContextPhaseParams p = new ContextPhaseParams(real.requestId(), first, real.contextState(),
                real.requestToken(), draft);
        return ContextPhaseParams.fromBytes(p.toBytes()); // its own checksum is right: the CRC alone cannot tell
    }

    @Test
    void withAuthenticationTokensReplacedOnTheWayAreRefusedNamingBothChecksumsAndTheGenuineOnesServed()
            throws IOException {
        Path secret = secret();
        LocalInstance ctx = start("ctx", REUSE, secret);
        LocalInstance genuineGen = start("gen", REUSE, secret);
        long[] first = {31_337};
        long[] draft = {5, 6, 7, 8, 9, 10};
        Req q = new Req(ctx, genuineGen, 950, 8 * 4 + 1);
        for (int r = 0; r < 2; r++) {
            ctx.transceiver(r).respondAndSendAsync(q.ctx[r]);
        }
        ContextPhaseParams real = ctx.transceiver(0).contextPhaseParams(950, first, draft);
        String issued = Integer.toHexString(real.tokensChecksum());
        List<ContextPhaseParams> tampered = List.of(
                routed(real, first, new long[] {5, 6, 7, 8, 9, 11}), // one draft token replaced
                routed(real, first, new long[0]),                    // the drafts dropped
                routed(real, new long[] {42}, draft));               // the first generated token replaced
        for (int k = 0; k < tampered.size(); k++) {
            ContextPhaseParams bad = tampered.get(k);
            assertThat(bad.tokensChecksum()).isNotEqualTo(real.tokensChecksum());
            String received = Integer.toHexString(bad.tokensChecksum());
            // Each attempt from a generation instance of its own (an id ends its life on a rank once).
            LocalInstance gen = start("gen-" + k, REUSE, secret);
            TransferRequest[] asked = new TransferRequest[2];
            for (int r = 0; r < 2; r++) {
                int[] ids = gen.cache(r).allocate(950, q.blocks);
                KvPattern.fill(gen.cache(r), ids, gen.cacheState(), r, 950 + POISON, q.blocks);
                asked[r] = TransferRequest.generation(bad, q.prompt, ids);
                gen.transceiver(r).requestAndReceiveAsync(asked[r]);
            }
            await().atMost(BOUND).until(() -> asked[0].isDone() && asked[1].isDone());
            for (int r = 0; r < 2; r++) {
                TransferRequest g = asked[r];
                assertThat(g.state()).as("%s", g).isEqualTo(RequestState.TRANS_ERROR);
                KvTransferException e = g.error().orElseThrow();
                assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNAUTHORIZED);
                assertThat(e.requestId()).isEqualTo(950);
                assertThat(e.getMessage()).contains("request 950", "changed between the instances",
                        "tokens checksum " + issued, "checksum " + received);
                assertThat(g.kvCacheSize()).isZero();
                KvPattern.verify(gen.cache(r), g.blockIds(), gen.cacheState(), r, 950 + POISON, q.blocks)
                        .assertOk();
                gen.cache(r).free(950);
            }
            // Both context ranks refused it (rank 1 did not issue the params; it shares the issuing key).
            await().atMost(BOUND).until(() -> ctxErrors.stream()
                    .filter(t -> String.valueOf(t.getMessage()).contains("checksum " + received)).count() >= 2);
            assertThat(q.ctx[0].isDone() || q.ctx[1].isDone()).as("refusals do not end the request").isFalse();
        }
        assertThat(ctxErrors).filteredOn(t -> String.valueOf(t.getMessage()).contains("changed between"))
                .hasSize(2 * tampered.size())
                .allSatisfy(t -> assertThat(t.getMessage()).contains("request 950", "tokens checksum " + issued));

        // The genuine params, carried byte for byte: served, every element verified, the exact tokens held.
        q.poisoned(genuineGen).plain(ContextPhaseParams.fromBytes(real.toBytes()));
        for (int r = 0; r < 2; r++) {
            genuineGen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
        }
        await().atMost(BOUND).until(() -> q.ctx[0].isDone() && q.ctx[1].isDone() && q.gen[0].isDone()
                && q.gen[1].isDone());
        q.verify(genuineGen);
        for (int r = 0; r < 2; r++) {
            ContextPhaseParams p = q.gen[r].contextPhaseParams().orElseThrow();
            assertThat(p.draftTokens()).containsExactly(draft);
            assertThat(p.firstGenTokens()).containsExactly(first);
        }
        q.free(ctx, genuineGen);
    }

    @Test
    void withoutAuthenticationOnlyTheCrcHoldsAndReplacedTokensWithAFreshOneGoThrough() {
        // As documented: with kvtransfer.auth off nothing binds the tokens to the request; a router that
        // re-checksums replaced tokens is not detected (the KV itself still moves exactly).
        LocalInstance ctx = start("ctx", REUSE, null, false);
        LocalInstance gen = start("gen", REUSE, null, false);
        ContextPhaseParams real = ctx.transceiver(0).contextPhaseParams(960, new long[] {1}, new long[] {2, 3});
        assertThat(real.requestToken()).isEmpty();
        long[] replaced = {2, 4};
        Req q = new Req(ctx, gen, 960, 8 * 4).plain(routed(real, new long[] {1}, replaced));
        q.submit(ctx, gen);
        q.verify(gen);
        for (int r = 0; r < 2; r++) {
            assertThat(q.gen[r].contextPhaseParams().orElseThrow().draftTokens()).containsExactly(replaced);
        }
        q.free(ctx, gen);
    }
}
