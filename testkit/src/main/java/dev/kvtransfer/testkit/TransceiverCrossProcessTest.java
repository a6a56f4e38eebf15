package dev.kvtransfer.testkit;

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
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.process.ChildJvm;
import dev.kvtransfer.testkit.process.ContextInstanceMain;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Conformance across two OS processes: the whole transfer path over a cross-process transport (a backend's test
 * is a short subclass supplying {@link #provider()} and, optionally, {@link #transportProperties()}, e.g. a short
 * peer-loss timeout). The context instance (core
 * {@code LocalInstance}, standard formatter) runs in a child JVM ({@link ContextInstanceMain}), the generation
 * instance in this JVM. They exchange the context phase params (base64 on the child's stdout) and the request ids
 * and prompt lengths (the child's stdin). Every element arriving here is checked against {@link KvPattern}, which
 * the child filled in.
 */
@RuleBound(seconds = 150, suiteSeconds = 420)
@org.junit.jupiter.api.extension.ExtendWith(LeakCheckExtension.class)
public abstract class TransceiverCrossProcessTest {
    private static final Duration T = Duration.ofSeconds(60);

    /** @return the transport under test; it must declare {@code CROSS_PROCESS} */
    protected abstract TransportProvider provider();

    /** @return transport properties for both processes (e.g. a short peer-loss timeout); none by default */
    protected Map<String, String> transportProperties() {
        return Map.of();
    }

    private final List<AutoCloseable> open = new ArrayList<>();
    /** The deployment secret both processes share (authentication is on by default). */
    private static java.nio.file.Path secret;

    @org.junit.jupiter.api.BeforeAll
    static void createSecret() throws IOException {
        secret = java.nio.file.Files.createTempFile("kvtransfer-secret", ".bin");
        secret.toFile().deleteOnExit();
        byte[] b = new byte[32];
        new java.security.SecureRandom().nextBytes(b);
        java.nio.file.Files.write(secret, b);
    }
    private final List<Throwable> genErrors = new CopyOnWriteArrayList<>();

    @AfterEach
    public void closeAll() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        assertThat(genErrors).as("background errors of the generation instance").isEmpty();
    }

    /** A context child with its instance ready. */
    private ChildJvm contextChild(String spec, int blocksPerRank, String... props) throws IOException {
        List<String> args = new ArrayList<>(List.of(provider().name(), spec, Integer.toString(blocksPerRank)));
        new TreeMap<>(transportProperties()).forEach((k, v) -> args.add(k + "=" + v));
        args.addAll(List.of(props));
        args.add(TransceiverConfig.P_AUTH_SECRET_FILE + "=" + secret);
        ChildJvm c = ChildJvm.start(ContextInstanceMain.class, "256m", args);
        open.add(c);
        c.awaitLine("READY", T);
        return c;
    }

    private static void tell(ChildJvm c, String line) throws IOException {
        OutputStream out = c.process().getOutputStream();
        out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    /** Asks the child to fill and make ready a request; returns its context phase params. */
    private static ContextPhaseParams contextRequest(ChildJvm c, long id, int prompt) throws IOException {
        tell(c, "CTX " + id + " " + prompt);
        String rest = c.awaitLine("PARAMS " + id + " ", T);
        ContextPhaseParams p = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(rest));
        assertThat(p.requestId()).isEqualTo(id);
        return p;
    }

    private LocalInstance generation(CacheState state, int blocksPerRank, TransceiverConfig base) {
        TransceiverConfig config = base.toBuilder().authSecretFile(secret).build();
        TransportConfig tc = TransportConfig.builder().properties(transportProperties()).build();
        LocalInstance gen = LocalInstance.builder("gen", state).transport(provider(), tc)
                .formatter(Plugins.discover().formatterFor(state.attentionType())).config(config)
                .blocksPerRank(blocksPerRank).errorHandler(genErrors::add).start();
        open.add(gen);
        return gen;
    }

    /** Generation-side requests of every rank for one request id. */
    private static List<TransferRequest> request(LocalInstance gen, ContextPhaseParams params, int prompt) {
        CacheState s = gen.cacheState();
        int total = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        for (int r = 0; r < gen.ranks(); r++) {
            int[] ids = gen.cache(r).allocate(params.requestId(),
                    BlockDistribution.count(total, s.contextParallelism(), s.cpRank(r)));
            TransferRequest q = TransferRequest.generation(params, prompt, ids);
            reqs.add(q);
            gen.transceiver(r).requestAndReceiveAsync(q);
        }
        return reqs;
    }

    /** Asserts every rank completed and holds exactly the pattern, then frees the blocks. */
    private static void assertExact(LocalInstance gen, List<TransferRequest> reqs, int prompt) {
        for (int r = 0; r < reqs.size(); r++) {
            TransferRequest q = reqs.get(r);
            assertThat(q.state()).as("generation rank %d: %s", r, q).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            int total = BlockDistribution.blocksFor(prompt, gen.cacheState().tokensPerBlock());
            KvPattern.Result v = KvPattern.verify(gen.cache(r), q.blockIds(), gen.cacheState(r), r, q.requestId(),
                    total);
            var l = gen.cache(r).layout();
            assertThat(v.checkedElements()).as("elements checked on rank %d", r).isEqualTo((long) q.blockIds().length
                    * l.localLayers() * l.kvFactor() * l.localHeads() * l.tokensPerBlock() * l.sizePerHead());
            v.assertOk();
            gen.cache(r).free(q.requestId());
        }
    }

    /**
     * Progress probe for the kill test's log: how many of the request's blocks (rank 0, TP1/PP1/CP1, 2-byte
     * elements) already hold their pattern value in their last element (V plane, last layer, head, token, dim).
     */
    private static int arrivedBlocks(LocalInstance gen, TransferRequest q) {
        var l = gen.cache(0).layout();
        int tpb = l.tokensPerBlock();
        long off = l.offset(l.localLayers() - 1, l.kvFactor() - 1, l.localHeads() - 1, tpb - 1, l.sizePerHead() - 1);
        int n = 0;
        int[] ids = q.blockIds();
        for (int i = 0; i < ids.length; i++) {
            short expect = (short) KvPattern.value(q.requestId(), l.localLayers() - 1, l.kvFactor() - 1,
                    l.localHeads() - 1, (long) i * tpb + tpb - 1, l.sizePerHead() - 1);
            short got = gen.cache(0).block(ids[i]).asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).getShort((int) off);
            n += got == expect ? 1 : 0;
        }
        return n;
    }

    private static void awaitDone(List<TransferRequest> reqs, Duration bound) {
        await("generation requests to end").atMost(bound).pollInterval(Duration.ofMillis(10))
                .until(() -> reqs.stream().allMatch(TransferRequest::isDone));
    }

    @Test
    public void required_spec3_13_contextInAChildProcessMovesEveryElementExactly() throws Exception {
        // Context TP2 (two ranks, heads split) -> generation PP2 (two ranks, layers split): the formatter splits
        // and concatenates through staging buffers on both sides of the process boundary.
        String ctxSpec = "2,1,8,8,64,16,FLOAT16";
        String genSpec = "1,2,8,8,64,16,FLOAT16";
        ChildJvm child = contextChild(ctxSpec, 160, "kvtransfer.transferBufferBytes=4194304",
                "kvtransfer.chunkBytes=1048576");
        TransceiverConfig cfg = TransceiverConfig.builder().backend(provider().name()).transferBufferBytes(4 << 20)
                .chunkBytes(1 << 20).kvTransferTimeout(T).build();
        LocalInstance gen = generation(ContextInstanceMain.state(genSpec), 160, cfg);
        int[] prompts = {1, 333, 1000, 16 * 40};
        List<List<TransferRequest>> all = new ArrayList<>();
        for (int i = 0; i < prompts.length; i++) {
            ContextPhaseParams p = contextRequest(child, 5000 + i, prompts[i]);
            all.add(request(gen, p, prompts[i]));
        }
        for (int i = 0; i < prompts.length; i++) {
            awaitDone(all.get(i), T);
            assertExact(gen, all.get(i), prompts[i]);
        }
        // The context side reports its requests as they end, in any order: some reports went by while this
        // test waited for later PARAMS lines (ChildJvm keeps those in seen()).
        Map<Long, String> ctxDone = new TreeMap<>();
        for (String line : child.seen()) {
            if (line.startsWith("CTXDONE ")) {
                String[] w = line.substring("CTXDONE ".length()).split(" ", 2);
                ctxDone.put(Long.parseLong(w[0]), w[1]);
            }
        }
        while (ctxDone.size() < prompts.length) {
            String[] w = child.awaitLine("CTXDONE ", T).split(" ", 2);
            ctxDone.put(Long.parseLong(w[0]), w[1]);
        }
        assertThat(ctxDone).containsOnlyKeys(5000L, 5001L, 5002L, 5003L)
                .allSatisfy((id, states) -> assertThat(states).isEqualTo("CONTEXT_COMPLETE,CONTEXT_COMPLETE"));
        tell(child, "EXIT");
        child.awaitLine("CLOSED", T);
        assertThat(child.awaitExit(T)).as("context child exit code; printed %s", child.seen()).isZero();
    }

    @Test
    public void required_spec3_14_killedContextProcessFailsTheRequestInFlightAndAFreshOneIsServed() throws Exception {
        killedContext(TransceiverConfig.TransferMode.PULL, 7000);
    }

    /**
     * The context process killed with a request in flight in the given mode (push: mid one-sided writes): the
     * generation side fails it in bound ({@code PEER_LOST} or {@code TIMEOUT}), then serves a fresh context's
     * request byte-exact. Subclasses run the push variant where the backend passes it (see their README).
     */
    protected final void killedContext(TransceiverConfig.TransferMode mode, long id) throws Exception {
        // 2 MiB blocks (32 layers x 2 x 8 heads x 16 tokens x 128 dims x 2 B); 192 blocks = 384 MiB per request.
        // Small blocks keep the in-flight probe (one block checked against the pattern) cheap.
        String spec = "1,1,32,8,128,16,FLOAT16";
        int blocks = 192;
        int bigPrompt = 16 * blocks;
        Duration kvTimeout = Duration.ofSeconds(8);
        String modeProp = TransceiverConfig.P_TRANSFER_MODE + "=" + mode.name().toLowerCase(java.util.Locale.ROOT);
        TransceiverConfig cfg = TransceiverConfig.builder().backend(provider().name()).transferBufferBytes(8 << 20)
                .chunkBytes(4 << 20).kvTransferTimeout(kvTimeout).transferMode(mode).build();
        LocalInstance gen = generation(ContextInstanceMain.state(spec), blocks + 2, cfg);

        ChildJvm doomed = contextChild(spec, blocks + 2, "kvtransfer.transferBufferBytes=8388608",
                "kvtransfer.chunkBytes=4194304", modeProp);
        ContextPhaseParams p = contextRequest(doomed, id, bigPrompt);
        List<TransferRequest> reqs = request(gen, p, bigPrompt);
        TransferRequest q = reqs.get(0);
        int firstBlock = q.blockIds()[0];
        // In flight: the first block already holds its bytes, the request has not ended.
        await("bytes of request " + id + " arriving").atMost(T).pollInterval(Duration.ofMillis(2))
                .until(() -> q.isDone() || KvPattern.verify(gen.cache(0), new int[] {firstBlock}, gen.cacheState(0),
                        0, id, blocks).ok());
        assertThat(q.isDone()).as("request %d still in flight when the context process is killed: %s", id, q)
                .isFalse();
        long t0 = System.nanoTime();
        doomed.process().destroyForcibly();
        int arrivedAtKill = arrivedBlocks(gen, q);
        Duration bound = kvTimeout.plusSeconds(10);
        awaitDone(reqs, bound);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        System.out.println("kill test (" + mode + "): " + arrivedAtKill + " of " + blocks + " blocks had arrived at "
                + "the kill; request " + id + " ended " + ms + " ms after it: " + q);
        assertThat(q.state()).as("%s", q).isEqualTo(RequestState.TRANS_ERROR);
        KvTransferException e = q.error().orElseThrow();
        assertThat(e.code()).as("%s", e.getMessage()).isIn(ErrorCode.PEER_LOST, ErrorCode.TIMEOUT);
        assertThat(e.requestId()).isEqualTo(id);
        gen.cache(0).free(id);
        assertThat(doomed.process().waitFor(30, TimeUnit.SECONDS)).isTrue();

        // The same generation instance takes the next request from a fresh context process, byte-exact.
        ChildJvm fresh = contextChild(spec, blocks + 2, "kvtransfer.transferBufferBytes=8388608",
                "kvtransfer.chunkBytes=4194304", modeProp);
        int prompt = 16 * 20 + 7;
        ContextPhaseParams p2 = contextRequest(fresh, id + 1, prompt);
        List<TransferRequest> ok = request(gen, p2, prompt);
        awaitDone(ok, T);
        assertExact(gen, ok, prompt);
        if (mode == TransceiverConfig.TransferMode.PUSH
                && provider().capabilities().contains(dev.kvtransfer.api.transport.TransportCapability.ONE_SIDED_WRITE)) {
            assertThat(ok.get(0).wasPushed()).as("request %d moved by push", id + 1).isTrue();
        }
        assertThat(fresh.awaitLine("CTXDONE " + (id + 1) + " ", T)).isEqualTo("CONTEXT_COMPLETE");
        tell(fresh, "EXIT");
        fresh.awaitLine("CLOSED", T);
        assertThat(fresh.awaitExit(T)).as("fresh child exit code; printed %s", fresh.seen()).isZero();
        // A one-sided write server (emulated writes) reports the killed writer as a background error: that, and
        // only that, is expected; anything else fails the test in closeAll.
        String deadPeer = p.contextState().commState().addresses().get(0);
        genErrors.removeIf(t -> t instanceof dev.kvtransfer.api.KvTransferException k
                && k.code() == ErrorCode.PEER_LOST && String.valueOf(k.getMessage()).contains(deadPeer));
    }
}
