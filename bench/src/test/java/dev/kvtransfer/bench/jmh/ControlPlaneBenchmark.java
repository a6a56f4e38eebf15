package dev.kvtransfer.bench.jmh;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;

/**
 * JMH: the control plane of one-block requests (its heap and time per request) through the whole path — {@code
 * CacheTransceiver} pair ({@code LocalInstance} context + generation, TP1, in this JVM), the protocol ({@code
 * CacheReceiver} / {@code CacheSender}, request info, ready signal, HMAC authentication), {@code
 * DefaultTransferSession}, the standard formatter and a real transport ({@code aeron}: {@code aeron:ipc} on the
 * embedded driver; or {@code loopback}), then the status agreement of both sides, as an engine's step does. One
 * operation is a window of {@code inflight} requests of one 16-token block (the bench's {@code tiny} model, 16 KiB)
 * submitted together and awaited; {@code -prof gc}'s {@code gc.alloc.rate.norm} is the heap of every thread of the JVM
 * per window (divide by {@code inflight} for per request). Block ids are allocated once (an engine's KV pool is
 * resident); request ids are fresh. Not a unit test and not run in CI; the command is in bench/README.md.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 3, time = 3)
// The parent pom's kvtransfer.jvm.flags (Chronicle Queue and Agrona on Java 17), as surefire passes them.
@Fork(value = 1, jvmArgsAppend = {
        "-Xmx1g",
        "-XX:+UseParallelGC",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
        "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
        "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
        "-Dchronicle.analytics.disable=true"})
public class ControlPlaneBenchmark {
    /** Transport provider name. */
    @Param({"aeron", "loopback"})
    public String backend;

    /** Requests in flight (one operation = this many requests). */
    @Param({"1", "64"})
    public int inflight;

    /** End-to-end part checksums. */
    @Param({"true"})
    public boolean checksums;

    private LocalInstance ctx;
    private LocalInstance gen;
    private int[][] ctxBlocks;
    private int[][] genBlocks;
    private TransferRequest[] ctxRequests;
    private TransferRequest[] genRequests;
    private int isl;
    private long nextId = 1;

    @Setup(Level.Trial)
    public void setUp() {
        Plugins plugins = Plugins.discover();
        CacheState state = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16)
                .dataType(DataType.FLOAT16).tensorParallelism(1).pipelineParallelism(1).build();
        Map<String, String> props = new LinkedHashMap<>();
        props.put(TransceiverConfig.P_BACKEND, backend);
        props.put(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, "30000");
        props.put(TransceiverConfig.P_TRANSFER_BUFFER_BYTES, Long.toString(1L << 20));
        props.put(TransceiverConfig.P_PARALLEL_RECEIVE, "true");
        props.put(TransceiverConfig.P_PART_CHECKSUMS, Boolean.toString(checksums));
        TransceiverConfig config = TransceiverConfig.fromProperties(props);
        TransportConfig base = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(30)).build();
        ctx = start("jmh-ctx", state, plugins, base, config);
        gen = start("jmh-gen", state, plugins, base, config);
        isl = state.tokensPerBlock();
        ctxBlocks = new int[inflight][];
        genBlocks = new int[inflight][];
        for (int i = 0; i < inflight; i++) {
            ctxBlocks[i] = ctx.cache(0).allocate(-1 - i, 1);
            genBlocks[i] = gen.cache(0).allocate(-1 - i, 1);
        }
        ctxRequests = new TransferRequest[inflight];
        genRequests = new TransferRequest[inflight];
    }

    private LocalInstance start(String name, CacheState state, Plugins plugins, TransportConfig base,
            TransceiverConfig config) {
        return LocalInstance.builder(name, state)
                .transport(plugins.transport(backend), base.toBuilder().name(name).build())
                .plugins(plugins).config(config).blocksPerRank(inflight).sharedBufferManager(true)
                .errorHandler(e -> {
                    throw new IllegalStateException(name + ": background error: " + e.getMessage(), e);
                })
                .start();
    }

    /**
     * One window: {@code inflight} one-block requests, context side made ready, generation side asks, all awaited,
     * then both sides' status agreement reports them.
     *
     * @return the last request id (consumed by JMH)
     * @throws Exception when a request fails or times out
     */
    @Benchmark
    public long window() throws Exception {
        long first = nextId;
        for (int i = 0; i < inflight; i++) {
            long id = nextId++;
            TransferRequest c = TransferRequest.context(id, isl, ctxBlocks[i]);
            ctx.transceiver(0).respondAndSendAsync(c);
            ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
            TransferRequest g = TransferRequest.generation(params, isl, genBlocks[i]);
            gen.transceiver(0).requestAndReceiveAsync(g);
            ctxRequests[i] = c;
            genRequests[i] = g;
        }
        for (int i = 0; i < inflight; i++) {
            genRequests[i].completion().toCompletableFuture().get(30, TimeUnit.SECONDS);
            ctxRequests[i].completion().toCompletableFuture().get(30, TimeUnit.SECONDS);
            if (genRequests[i].state() != RequestState.GENERATION_TRANS_COMPLETE) {
                throw new IllegalStateException("request " + (first + i) + ": " + genRequests[i].state());
            }
        }
        ctx.transceiver(0).checkContextTransferStatus(OptionalInt.empty());
        gen.transceiver(0).checkGenTransferStatus(OptionalInt.empty());
        return nextId;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        for (int i = 0; i < inflight; i++) {
            ctx.cache(0).free(-1 - i);
            gen.cache(0).free(-1 - i);
        }
        gen.close();
        ctx.close();
    }
}
