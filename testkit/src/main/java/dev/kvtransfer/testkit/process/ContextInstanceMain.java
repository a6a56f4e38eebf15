package dev.kvtransfer.testkit.process;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.KvPattern;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Collectors;

/**
 * The context instance of the transceiver-level cross-process tests, in its own JVM: a core {@link LocalInstance}
 * (ranks as threads) with the standard formatter over the transport named on the command line. It is driven line
 * by line over stdin and answers on stdout:
 * <ul>
 *   <li>start-up: prints {@code READY} once every rank listens;</li>
 *   <li>{@code CTX <requestId> <promptLength>}: allocates the request's blocks on every rank, fills them with
 *       {@link KvPattern}, makes the request ready ({@code respondAndSendAsync}) and prints
 *       {@code PARAMS <requestId> <base64 of ContextPhaseParams.toBytes()>}; when every rank's side ended it frees
 *       the blocks and prints {@code CTXDONE <requestId> <state per rank, comma-separated>};</li>
 *   <li>{@code EXIT}: closes the instance (which fails on leaked buffers), prints {@code CLOSED}, exits 0.</li>
 * </ul>
 * Stdin reaching its end (the test JVM died) halts the child at once, so no child outlives a test run.
 *
 * <p>Arguments: {@code <backend> <state spec> <blocksPerRank> [key=value...]}; the spec is
 * {@code tp,pp,layers,heads,sizePerHead,tokensPerBlock,dataType} ({@link #state(String)}); every {@code key=value}
 * goes to both the transport config and {@link TransceiverConfig#fromProperties(Map)} (which reads the
 * {@code kvtransfer.*} keys). Exit code 1 with a stack trace on stderr on any failure.
 */
public final class ContextInstanceMain {
    private ContextInstanceMain() {
    }

    /**
     * Builds a cache state from a compact spec both JVMs share.
     *
     * @param spec {@code tp,pp,layers,heads,sizePerHead,tokensPerBlock,dataType}
     * @return the state
     */
    public static CacheState state(String spec) {
        String[] f = spec.split(",");
        return CacheState.builder().uniformKvHeads(Integer.parseInt(f[2]), Integer.parseInt(f[3]))
                .sizePerHead(Integer.parseInt(f[4])).tokensPerBlock(Integer.parseInt(f[5]))
                .tensorParallelism(Integer.parseInt(f[0])).pipelineParallelism(Integer.parseInt(f[1]))
                .dataType(DataType.valueOf(f[6])).attentionType(AttentionType.DEFAULT).build();
    }

    /**
     * Entry point.
     *
     * @param args see the class comment
     */
    public static void main(String[] args) {
        try {
            run(args);
            System.out.println("CLOSED");
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.println("FAILED " + e);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String backend = args[0];
        CacheState state = state(args[1]);
        int blocksPerRank = Integer.parseInt(args[2]);
        Map<String, String> props = new LinkedHashMap<>();
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        Plugins plugins = Plugins.discover();
        TransportConfig tc = TransportConfig.builder().properties(props).build();
        TransceiverConfig config = TransceiverConfig.fromProperties(props).toBuilder().backend(backend).build();
        try (LocalInstance ctx = LocalInstance.builder("ctx-child", state).transport(plugins.transport(backend), tc)
                .formatter(plugins.formatterFor(state.attentionType())).config(config).blocksPerRank(blocksPerRank)
                .errorHandler(e -> {
                    // A background failure of the transceiver is a test failure: report it and stop at once.
                    e.printStackTrace();
                    System.out.println("FAILED background " + e);
                    System.out.flush();
                    Runtime.getRuntime().halt(1);
                }).start()) {
            System.out.println("READY");
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; ; ) {
                line = in.readLine();
                if (line == null) {
                    Runtime.getRuntime().halt(3); // the test JVM is gone
                }
                String[] w = line.trim().split(" ");
                if (w[0].equals("EXIT")) {
                    break;
                } else if (w[0].equals("CTX")) {
                    serve(ctx, Long.parseLong(w[1]), Integer.parseInt(w[2]));
                } else {
                    throw new IllegalArgumentException("unknown command '" + line + "'");
                }
            }
        }
    }

    private static void serve(LocalInstance ctx, long id, int prompt) {
        CacheState s = ctx.cacheState();
        int totalBlocks = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        for (int r = 0; r < ctx.ranks(); r++) {
            int n = BlockDistribution.count(totalBlocks, s.contextParallelism(), s.cpRank(r));
            int[] ids = ctx.cache(r).allocate(id, n);
            KvPattern.fill(ctx.cache(r), ids, ctx.cacheState(r), r, id, totalBlocks);
            reqs.add(TransferRequest.context(id, prompt, ids));
        }
        for (int r = 0; r < ctx.ranks(); r++) {
            ctx.transceiver(r).respondAndSendAsync(reqs.get(r));
        }
        CompletableFuture.allOf(reqs.stream().map(q -> q.completion().toCompletableFuture())
                .toArray(CompletableFuture[]::new)).handle((v, e) -> {
                    for (int r = 0; r < ctx.ranks(); r++) {
                        ctx.cache(r).free(id);
                    }
                    // States first (what the tests compare), then any error, for the failure message.
                    System.out.println("CTXDONE " + id + " " + reqs.stream().map(q -> q.state().name())
                            .collect(Collectors.joining(",")) + reqs.stream().flatMap(q -> q.error().stream())
                            .map(x -> " | " + x.getMessage()).collect(Collectors.joining()));
                    System.out.flush();
                    return null;
                });
        byte[] params = ctx.contextPhaseParams(id, 0).toBytes();
        System.out.println("PARAMS " + id + " " + Base64.getEncoder().encodeToString(params));
        System.out.flush();
    }
}
