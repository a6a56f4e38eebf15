package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
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
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The authenticated control plane attacked as a same-host attacker would: a requester without
 * the deployment secret, and one that has it but asks first for a request whose per-request token it does not
 * hold. Each is refused {@code UNAUTHORIZED}, counted on the context side, told only that it was refused; no KV
 * byte moves to it, the secret never appears in an error, and the genuine requester of the same request is served
 * byte-exact afterwards (the attack that made the genuine requester fail is gone).
 */
@ExtendWith(LeakCheckExtension.class)
class ControlPlaneAuthTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(16)
            .tokensPerBlock(8).build();

    @TempDir
    Path dir;
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> ctxErrors = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() {
        for (int i = instances.size() - 1; i >= 0; i--) {
            instances.get(i).close();
        }
    }

    private Path secret(String name) throws IOException {
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        return Files.write(dir.resolve(name), b);
    }

    private LocalInstance start(String name, Path secret, MeterRegistry meters, boolean context) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20).authSecretFile(secret)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        LocalInstance.Builder b = LocalInstance.builder(name, STATE).transport(new LoopbackTransportProvider(),
                TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "auth").build())
                .config(c).blocksPerRank(32).meters(meters);
        if (context) {
            b.errorHandler(ctxErrors::add);
        }
        LocalInstance i = b.start();
        instances.add(i);
        return i;
    }

    private static double unauthorized(MeterRegistry m) {
        return m.find("kvtransfer.errors").tag("code", ErrorCode.UNAUTHORIZED.name()).counters().stream()
                .mapToDouble(Counter::count).sum();
    }

    /** The context side's request, filled with the pattern and responding. */
    private static TransferRequest respond(LocalInstance ctx, long id, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, STATE, 0, id, blocks);
        TransferRequest q = TransferRequest.context(id, prompt, c);
        ctx.transceiver(0).respondAndSendAsync(q);
        return q;
    }

    private static TransferRequest ask(LocalInstance gen, ContextPhaseParams params, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        int[] g = gen.cache(0).allocate(params.requestId(), blocks);
        // Poison: an unauthorized requester's blocks must stay exactly as they were (no byte written).
        KvPattern.fill(gen.cache(0), g, STATE, 0, -1, blocks);
        TransferRequest q = TransferRequest.generation(params, prompt, g);
        gen.transceiver(0).requestAndReceiveAsync(q);
        return q;
    }

    private static void assertRefusedAndUntouched(LocalInstance gen, TransferRequest q, int prompt) {
        await().atMost(BOUND).until(q::isDone);
        assertThat(q.state()).as("%s", q).isEqualTo(RequestState.TRANS_ERROR);
        KvTransferException e = q.error().orElseThrow();
        assertThat(e.code()).as("%s", e.getMessage()).isEqualTo(ErrorCode.UNAUTHORIZED);
        assertThat(e.requestId()).isEqualTo(q.requestId());
        assertThat(e.getMessage()).containsAnyOf("refused", "failed authentication");
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        KvPattern.verify(gen.cache(0), q.blockIds(), STATE, 0, -1, blocks).assertOk();
        assertThat(q.kvCacheSize()).isZero();
        gen.cache(0).free(q.requestId());
    }

    private static void assertServed(LocalInstance gen, TransferRequest genReq, TransferRequest ctxReq, int prompt) {
        await().atMost(BOUND).until(() -> genReq.isDone() && ctxReq.isDone());
        assertThat(genReq.state()).as("%s", genReq).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        assertThat(ctxReq.state()).as("%s", ctxReq).isEqualTo(RequestState.CONTEXT_COMPLETE);
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        KvPattern.verify(gen.cache(0), genReq.blockIds(), STATE, 0, genReq.requestId(), blocks).assertOk();
    }

    @Test
    void aRequesterWithoutTheDeploymentSecretIsRefusedCountedAndTheGenuineOneIsServed() throws Exception {
        Path deployment = secret("deployment.key");
        Path other = secret("other.key");
        MeterRegistry ctxMeters = new SimpleMeterRegistry();
        LocalInstance ctx = start("ctx", deployment, ctxMeters, true);
        LocalInstance intruder = start("intruder", other, new SimpleMeterRegistry(), false);
        LocalInstance gen = start("gen", deployment, new SimpleMeterRegistry(), false);
        int prompt = 8 * 6 + 3;
        TransferRequest served = respond(ctx, 700, prompt);
        ContextPhaseParams params = ctx.contextPhaseParams(700, 0);

        // The intruder holds the genuine params (even the token) but not the secret, and asks first.
        TransferRequest forged = ask(intruder, params, prompt);
        assertRefusedAndUntouched(intruder, forged, prompt);
        await().atMost(BOUND).until(() -> unauthorized(ctxMeters) >= 1);
        assertThat(served.isDone()).as("the context request waits for its genuine requester: %s", served)
                .isFalse();

        TransferRequest genuine = ask(gen, params, prompt);
        assertServed(gen, genuine, served, prompt);
        assertThat(unauthorized(ctxMeters)).isEqualTo(1.0);
        String secretHex = HexFormat.of().formatHex(Files.readAllBytes(deployment));
        assertThat(ctxErrors).isNotEmpty().allSatisfy(t -> {
            assertThat(t).isInstanceOf(KvTransferException.class);
            assertThat(((KvTransferException) t).code()).isEqualTo(ErrorCode.UNAUTHORIZED);
            assertThat(t.getMessage()).doesNotContain(secretHex).contains("kvtransfer.authSecretFile");
        });
        gen.cache(0).free(700);
        ctx.cache(0).free(700);
    }

    @Test
    void aSecretHolderWithoutTheRequestsTokenIsRefusedAndTheTokenHolderIsServed() throws Exception {
        Path deployment = secret("deployment.key");
        MeterRegistry ctxMeters = new SimpleMeterRegistry();
        LocalInstance ctx = start("ctx", deployment, ctxMeters, true);
        LocalInstance other = start("other", deployment, new SimpleMeterRegistry(), false);
        LocalInstance gen = start("gen", deployment, new SimpleMeterRegistry(), false);
        int prompt = 8 * 4;
        TransferRequest served = respond(ctx, 710, prompt);
        ContextPhaseParams real = ctx.contextPhaseParams(710, 0);
        // Another instance of the deployment guesses the id (ids are often sequential) but not the token.
        byte[] guessed = new byte[ContextPhaseParams.TOKEN_BYTES];
        new SecureRandom().nextBytes(guessed);
        ContextPhaseParams forgedParams = new ContextPhaseParams(710, new long[0], real.contextState(), guessed);
        TransferRequest forged = ask(other, forgedParams, prompt);
        assertRefusedAndUntouched(other, forged, prompt);
        await().atMost(BOUND).until(() -> unauthorized(ctxMeters) >= 1);
        assertThat(served.isDone()).isFalse();

        TransferRequest genuine = ask(gen, real, prompt);
        assertServed(gen, genuine, served, prompt);
        assertThat(unauthorized(ctxMeters)).isEqualTo(1.0);
        gen.cache(0).free(710);
        ctx.cache(0).free(710);
    }

    @Test
    void aSecondRequesterOfARequestAlreadyServedIsRefusedNotLeftToTimeOut() throws Exception {
        Path deployment = secret("deployment.key");
        LocalInstance ctx = start("ctx", deployment, new SimpleMeterRegistry(), true);
        LocalInstance gen = start("gen", deployment, new SimpleMeterRegistry(), false);
        LocalInstance late = start("late", deployment, new SimpleMeterRegistry(), false);
        int prompt = 8 * 3;
        TransferRequest served = respond(ctx, 720, prompt);
        ContextPhaseParams params = ctx.contextPhaseParams(720, 0);
        TransferRequest first = ask(gen, params, prompt);
        assertServed(gen, first, served, prompt);

        // The same params (token included) presented again by another instance of the deployment.
        TransferRequest second = ask(late, params, prompt);
        await().atMost(BOUND).until(second::isDone);
        KvTransferException e = second.error().orElseThrow();
        assertThat(e.code()).as("%s", e.getMessage()).isNotEqualTo(ErrorCode.TIMEOUT);
        assertThat(e.getMessage()).contains("already served");
        KvPattern.verify(late.cache(0), second.blockIds(), STATE, 0, -1,
                BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock())).assertOk();
        late.cache(0).free(720);
        gen.cache(0).free(720);
        ctx.cache(0).free(720);
        ctxErrors.clear();
    }
    @Test
    void aSecretHolderWhoDerivesTheTokenFromTheSecretIsRefusedAndTheGenuineOneIsServed() throws Exception {
        // Tokens used to be an HMAC of the request id under a key derived from the deployment secret, so
        // any holder of the secret (every generation instance) computed any request's token and took its KV.
        Path deployment = secret("deployment.key");
        MeterRegistry ctxMeters = new SimpleMeterRegistry();
        LocalInstance ctx = start("ctx", deployment, ctxMeters, true);
        LocalInstance insider = start("insider", deployment, new SimpleMeterRegistry(), false);
        LocalInstance gen = start("gen", deployment, new SimpleMeterRegistry(), false);
        int prompt = 8 * 4;
        TransferRequest served = respond(ctx, 730, prompt);
        ContextPhaseParams real = ctx.contextPhaseParams(730, 0);
        byte[] secret = Files.readAllBytes(deployment);
        byte[][] derived = {
                // the former derivation, computed with the JDK as an attacker would
                formerToken(secret, 730),
                // the project's own code in the insider's process: its own rank's key, not the context's
                dev.kvtransfer.core.transfer.ControlAuth.of(secret).token(730),
                insider.transceiver(0).contextPhaseParams(730, new long[0]).requestToken()};
        for (int k = 0; k < derived.length; k++) {
            // Each attempt from an instance of its own (an id ends its life on a rank once).
            LocalInstance from = k == 0 ? insider : start("insider-" + k, deployment, new SimpleMeterRegistry(), false);
            ContextPhaseParams forged = new ContextPhaseParams(730, new long[0], real.contextState(), derived[k]);
            TransferRequest stolen = ask(from, forged, prompt);
            assertRefusedAndUntouched(from, stolen, prompt);
        }
        await().atMost(BOUND).until(() -> unauthorized(ctxMeters) >= derived.length);
        assertThat(served.isDone()).as("refused askers do not end the request").isFalse();

        TransferRequest genuine = ask(gen, real, prompt);
        assertServed(gen, genuine, served, prompt);
        assertThat(unauthorized(ctxMeters)).isEqualTo(derived.length);
        gen.cache(0).free(730);
        ctx.cache(0).free(730);
        ctxErrors.clear();
    }

    @Test
    void aTokenHandedOutByOneRankOfATensorParallelContextVerifiesOnEveryRank() throws Exception {
        Path deployment = secret("deployment.key");
        CacheState tp2 = STATE.toBuilder().tensorParallelism(2).build();
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20).authSecretFile(deployment)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        LocalInstance ctx = LocalInstance.builder("ctx", tp2).transport(new LoopbackTransportProvider(),
                TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "auth").build())
                .config(c).blocksPerRank(32).errorHandler(ctxErrors::add).start();
        instances.add(ctx);
        // The same layout on the generation side (the whole-block formatter here): each generation rank asks its
        // own context rank, both with the token rank 0 handed out.
        LocalInstance gen = LocalInstance.builder("gen", tp2).transport(new LoopbackTransportProvider(),
                TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "auth").build())
                .config(c).blocksPerRank(32).start();
        instances.add(gen);
        int prompt = 8 * 5;
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        List<TransferRequest> sides = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            int[] ids = ctx.cache(r).allocate(740, blocks);
            KvPattern.fill(ctx.cache(r), ids, tp2, r, 740, blocks);
            TransferRequest q = TransferRequest.context(740, prompt, ids);
            ctx.transceiver(r).respondAndSendAsync(q);
            sides.add(q);
        }
        ContextPhaseParams fromRank0 = ctx.transceiver(0).contextPhaseParams(740, new long[0]);
        for (int r = 0; r < 2; r++) {
            int[] g = gen.cache(r).allocate(740, blocks);
            TransferRequest q = TransferRequest.generation(fromRank0, prompt, g);
            gen.transceiver(r).requestAndReceiveAsync(q);
            sides.add(q);
        }
        await().atMost(BOUND).until(() -> sides.stream().allMatch(TransferRequest::isDone));
        for (int r = 0; r < 2; r++) {
            assertThat(sides.get(r).state()).as("%s", sides.get(r)).isEqualTo(RequestState.CONTEXT_COMPLETE);
            TransferRequest q = sides.get(2 + r);
            assertThat(q.state()).as("%s", q).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.verify(gen.cache(r), q.blockIds(), tp2, r, 740, blocks).assertOk();
            gen.cache(r).free(740);
            ctx.cache(r).free(740);
        }
    }

    /**
     * The token as it was derived from the deployment secret alone (any secret holder could): HMAC(HMAC(secret, label),
     * little-endian id), 16 bytes.
     */
    private static byte[] formerToken(byte[] secret, long id) throws Exception {
        javax.crypto.Mac m = javax.crypto.Mac.getInstance("HmacSHA256");
        m.init(new javax.crypto.spec.SecretKeySpec(secret, "HmacSHA256"));
        byte[] key = m.doFinal("kvtransfer-request-token-v1".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        m.init(new javax.crypto.spec.SecretKeySpec(key, "HmacSHA256"));
        byte[] le = java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(id).array();
        return java.util.Arrays.copyOf(m.doFinal(le), ContextPhaseParams.TOKEN_BYTES);
    }
}
