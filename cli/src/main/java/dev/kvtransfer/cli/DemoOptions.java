package dev.kvtransfer.cli;

import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;
import dev.kvtransfer.core.TransceiverConfig;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The shape and layout options shared by {@code demo} and its worker process. {@link #toArgs()} turns them
 * back into arguments so the parent can hand exactly the same shape to a child JVM.
 */
public final class DemoOptions {
    @Option(names = "--backend", description = "transport: aeron (default), ucx, mpi, loopback (in-JVM test vehicle)")
    String backend = "aeron";

    @Option(names = "--model", description = "shape preset: tiny, llama3-8b, llama3-70b, qwen2.5-7b, deepseek-v3, "
            + "qwen3-next-shape (hybrid: attention and recurrent state layers; --*-layers-per-pp then split all 48), "
            + "gemma3-shape (sliding windows: 5 local layers of 1024 tokens to 1 global, repeated over --layers)")
    String model;

    @Option(names = "--layers", description = "attention layers (default: preset, else 4)")
    Integer layers;

    @Option(names = "--kv-heads", description = "global KV heads per layer (default: preset, else 4)")
    Integer kvHeads;

    @Option(names = "--size-per-head", description = "elements per head (default: preset, else 16)")
    Integer sizePerHead;

    @Option(names = "--tokens-per-block", description = "tokens per KV block (default: preset, else 16)")
    Integer tokensPerBlock;

    @Option(names = "--dtype", description = "fp32, fp16, bf16, fp8, int8 (default: preset, else fp16)")
    String dtype;

    @Option(names = "--attention", description = "default or mla (default: default)")
    String attention = "default";

    @Option(names = "--ctx-tp", description = "context TP (default 1)")
    int ctxTp = 1;
    @Option(names = "--ctx-pp", description = "context PP (default 1)")
    int ctxPp = 1;
    @Option(names = "--ctx-cp", description = "context CP (default 1)")
    int ctxCp = 1;
    @Option(names = "--ctx-layers-per-pp", split = ",", description = "context layers per PP rank, e.g. 3,3,2,2")
    List<Integer> ctxLayersPerPp;
    @Option(names = "--ctx-attention-dp", description = "attention data parallelism on the context side (DP size = TP)")
    boolean ctxAttentionDp;

    @Option(names = "--gen-tp", description = "generation TP (default 1)")
    int genTp = 1;
    @Option(names = "--gen-pp", description = "generation PP (default 1)")
    int genPp = 1;
    @Option(names = "--gen-cp", description = "generation CP (default 1)")
    int genCp = 1;
    @Option(names = "--gen-layers-per-pp", split = ",", description = "generation layers per PP rank")
    List<Integer> genLayersPerPp;
    @Option(names = "--gen-attention-dp", description = "attention data parallelism on the generation side (DP size = TP)")
    boolean genAttentionDp;

    @Option(names = "--ctx-pool-layout", description = "context KV pool layout: block (default), layer-nhd, layer-hnd")
    String ctxPoolLayout = "block";

    @Option(names = "--gen-pool-layout", description = "generation KV pool layout: block (default), layer-nhd, layer-hnd")
    String genPoolLayout = "block";

    @Option(names = "--pool-memory", description = "where both instances' KV pools live: host (default) or device "
            + "(GPU memory through the cuda memory plugin; staging is pinned host memory, filled and drained by "
            + "device copies; refused with the plugin's reason where CUDA is not usable)")
    String poolMemory = "host";

    @Option(names = "--cuda-device", description = "with --pool-memory device: the CUDA device ordinal (default 0)")
    int cudaDevice;

    @Option(names = "--mla-rope-dim", description = "MLA with a layer pool: store each latent row split into nope "
            + "[0, D-R) and rope [D-R, D) segments in separate regions (default 0: not split)")
    int mlaRopeDim;

    @Option(names = "--gen-reuse-blocks", description = "the generation side already holds the first N blocks of "
            + "every request (filled with KvPattern, as a prefix cache would hold them) and asks only for the rest "
            + "(default 0)")
    int genReuseBlocks;

    @Option(names = "--mode", description = "pull (default: context ranks send, generation ranks receive) or push "
            + "(context ranks write into the generation ranks' registered pools)")
    String mode = "pull";

    @Option(names = "--verify", negatable = true, defaultValue = "true", fallbackValue = "true", description = "check every received element with KvPattern (default on)")
    boolean verify = true;

    @Option(names = "--dump-dir", description = "generation ranks write DIR/gen-rank-R/request-ID.bin")
    Path dumpDir;

    @Option(names = "--timing-dir", description = "write rank_<r>_send.csv / rank_<r>_recv.csv timing files here")
    Path timingDir;

    @Option(names = "--set", description = "transceiver property, e.g. --set kvtransfer.sendConcurrency=4")
    Map<String, String> properties = new LinkedHashMap<>();

    @Option(names = "--transport-set", description = "transport property, e.g. --transport-set aeron.termLength=67108864")
    Map<String, String> transportProperties = new LinkedHashMap<>();

    @picocli.CommandLine.Mixin
    dev.kvtransfer.cli.journal.JournalOptions journal = new dev.kvtransfer.cli.journal.JournalOptions();

    @Option(names = "--timeout-s", description = "per-request transfer deadline in seconds (default 120)")
    int timeoutSeconds = 120;

    private ModelPreset preset() {
        return model == null ? null : ModelPreset.byId(model);
    }

    AttentionType attentionType() {
        switch (attention.toLowerCase(Locale.ROOT)) {
            case "default":
            case "mha":
            case "gqa":
                return AttentionType.DEFAULT;
            case "mla":
                return AttentionType.MLA;
            default:
                throw new IllegalArgumentException("--attention " + attention + ": expected default or mla");
        }
    }

    DataType dataType() {
        ModelPreset p = preset();
        String d = dtype != null ? dtype : (p != null ? null : "fp16");
        if (d == null) {
            return p.dataType;
        }
        switch (d.toLowerCase(Locale.ROOT)) {
            case "fp32":
            case "float32":
                return DataType.FLOAT32;
            case "fp16":
            case "float16":
                return DataType.FLOAT16;
            case "bf16":
            case "bfloat16":
                return DataType.BFLOAT16;
            case "fp8":
                return DataType.FP8;
            case "int8":
                return DataType.INT8;
            default:
                throw new IllegalArgumentException("--dtype " + d + ": expected fp32, fp16, bf16, fp8 or int8");
        }
    }

    private int pick(Integer explicit, int fromPreset, int fallback) {
        if (explicit != null) {
            return explicit;
        }
        return preset() != null ? fromPreset : fallback;
    }

    int layers() {
        ModelPreset p = preset();
        return pick(layers, p == null ? 0 : p.layers, 4);
    }

    int tokensPerBlock() {
        ModelPreset p = preset();
        return pick(tokensPerBlock, p == null ? 0 : p.tokensPerBlock, 16);
    }

    private CacheState.Builder shape() {
        ModelPreset p = preset();
        AttentionType at = attentionType();
        int heads = at == AttentionType.MLA ? 1 : pick(kvHeads, p == null ? 0 : p.kvHeads, 4);
        if (genReuseBlocks < 0) {
            throw new IllegalArgumentException("--gen-reuse-blocks must be 0 or more, was " + genReuseBlocks);
        }
        return CacheState.builder()
                .blockReuse(genReuseBlocks > 0)
                .uniformKvHeads(layers(), heads)
                .sizePerHead(pick(sizePerHead, p == null ? 0 : p.sizePerHead, 16))
                .tokensPerBlock(tokensPerBlock())
                .dataType(dataType())
                .attentionType(at)
                .windowGroups(p == null || p.windowPattern == null ? null
                        : WindowGroups.pattern(layers(), p.windowPattern));
    }

    /** @return the context instance's cache state (DP rank 0 when attention DP is on) */
    CacheState contextState() {
        CacheState.Builder b = shape().tensorParallelism(ctxTp).pipelineParallelism(ctxPp).contextParallelism(ctxCp)
                .attentionDp(ctxAttentionDp, 0, ctxAttentionDp ? ctxTp : 1);
        RecurrentStateShape rec = preset() == null ? null : preset().recurrent;
        if (rec != null) {
            b.recurrentState(rec.withLayersPerPp(ctxLayersPerPp == null ? List.of() : ctxLayersPerPp));
        } else if (ctxLayersPerPp != null) {
            b.attentionLayersPerPp(ctxLayersPerPp);
        }
        return b.poolLayout(poolLayout("--ctx-pool-layout", ctxPoolLayout)).build();
    }

    /** @return the generation instance's cache state (DP rank 0 when attention DP is on) */
    CacheState generationState() {
        CacheState.Builder b = shape().tensorParallelism(genTp).pipelineParallelism(genPp).contextParallelism(genCp)
                .attentionDp(genAttentionDp, 0, genAttentionDp ? genTp : 1);
        RecurrentStateShape rec = preset() == null ? null : preset().recurrent;
        if (rec != null) {
            b.recurrentState(rec.withLayersPerPp(genLayersPerPp == null ? List.of() : genLayersPerPp));
        } else if (genLayersPerPp != null) {
            b.attentionLayersPerPp(genLayersPerPp);
        }
        return b.poolLayout(poolLayout("--gen-pool-layout", genPoolLayout)).build();
    }

    /**
     * A side's pool layout: the kind named, with the split latent of {@code --mla-rope-dim} when the kind is a layer
     * pool (a block pool keeps whole latent rows).
     */
    private PoolLayout poolLayout(String option, String name) {
        PoolLayout.Kind kind;
        try {
            kind = PoolLayout.Kind.parse(name);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(option + ": " + e.getMessage());
        }
        if (mlaRopeDim < 0) {
            throw new IllegalArgumentException("--mla-rope-dim must be 0 or more, was " + mlaRopeDim);
        }
        if (mlaRopeDim > 0 && attentionType() != AttentionType.MLA) {
            throw new IllegalArgumentException("--mla-rope-dim splits an MLA latent: it needs --attention mla");
        }
        return new PoolLayout(kind, kind == PoolLayout.Kind.BLOCK ? 0 : mlaRopeDim);
    }

    /** @return whether the generation side asks for push transfers */
    boolean push() {
        switch (mode.toLowerCase(Locale.ROOT)) {
            case "pull":
                return false;
            case "push":
                return true;
            default:
                throw new IllegalArgumentException("--mode " + mode + ": expected pull or push");
        }
    }

    TransceiverConfig transceiverConfig() {
        Map<String, String> props = new LinkedHashMap<>();
        props.put(TransceiverConfig.P_BACKEND, backend);
        props.put(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, Long.toString(timeoutSeconds * 1000L));
        props.put(TransceiverConfig.P_TRANSFER_MODE, push() ? "push" : "pull");
        if (timingDir != null) {
            props.put(TransceiverConfig.P_TIMING_DIR, timingDir.toAbsolutePath().toString());
        }
        props.putAll(journal.properties());
        props.putAll(properties);
        return TransceiverConfig.fromProperties(props);
    }

    /** @return these options as command-line arguments */
    List<String> toArgs() {
        List<String> a = new ArrayList<>();
        a.add("--backend=" + backend);
        if (model != null) {
            a.add("--model=" + model);
        }
        opt(a, "--layers", layers);
        opt(a, "--kv-heads", kvHeads);
        opt(a, "--size-per-head", sizePerHead);
        opt(a, "--tokens-per-block", tokensPerBlock);
        if (dtype != null) {
            a.add("--dtype=" + dtype);
        }
        a.add("--attention=" + attention);
        a.add("--ctx-tp=" + ctxTp);
        a.add("--ctx-pp=" + ctxPp);
        a.add("--ctx-cp=" + ctxCp);
        if (ctxLayersPerPp != null) {
            a.add("--ctx-layers-per-pp=" + join(ctxLayersPerPp));
        }
        if (ctxAttentionDp) {
            a.add("--ctx-attention-dp");
        }
        a.add("--gen-tp=" + genTp);
        a.add("--gen-pp=" + genPp);
        a.add("--gen-cp=" + genCp);
        if (genLayersPerPp != null) {
            a.add("--gen-layers-per-pp=" + join(genLayersPerPp));
        }
        if (genAttentionDp) {
            a.add("--gen-attention-dp");
        }
        a.add("--ctx-pool-layout=" + ctxPoolLayout);
        a.add("--gen-pool-layout=" + genPoolLayout);
        a.add("--mla-rope-dim=" + mlaRopeDim);
        a.add("--pool-memory=" + poolMemory);
        a.add("--cuda-device=" + cudaDevice);
        a.add("--gen-reuse-blocks=" + genReuseBlocks);
        a.add("--mode=" + mode);
        a.add(verify ? "--verify" : "--no-verify");
        if (dumpDir != null) {
            a.add("--dump-dir=" + dumpDir.toAbsolutePath());
        }
        if (timingDir != null) {
            a.add("--timing-dir=" + timingDir.toAbsolutePath());
        }
        properties.forEach((k, v) -> a.add("--set=" + k + "=" + v));
        transportProperties.forEach((k, v) -> a.add("--transport-set=" + k + "=" + v));
        a.add("--timeout-s=" + timeoutSeconds);
        a.addAll(journal.toArgs());
        return a;
    }

    private static void opt(List<String> a, String name, Integer v) {
        if (v != null) {
            a.add(name + "=" + v);
        }
    }

    private static String join(List<Integer> l) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < l.size(); i++) {
            sb.append(i == 0 ? "" : ",").append(l.get(i));
        }
        return sb.toString();
    }

    /** @return where the KV pools live ({@code --pool-memory}) */
    dev.kvtransfer.api.memory.MemoryKind poolKind() {
        switch (poolMemory.toLowerCase(Locale.ROOT)) {
            case "host":
                return dev.kvtransfer.api.memory.MemoryKind.HOST;
            case "device":
            case "gpu":
            case "cuda":
                return dev.kvtransfer.api.memory.MemoryKind.DEVICE;
            default:
                throw new IllegalArgumentException("--pool-memory " + poolMemory + ": expected host or device");
        }
    }

    /** @return a one-line description of the two layouts */
    String layoutLabel() {
        return "ctx TP" + ctxTp + " PP" + ctxPp + (ctxCp > 1 ? " CP" + ctxCp : "") + (ctxAttentionDp ? " DP" : "")
                + pool(ctxPoolLayout) + " -> gen TP" + genTp + " PP" + genPp + (genCp > 1 ? " CP" + genCp : "")
                + (genAttentionDp ? " DP" : "") + pool(genPoolLayout) + (push() ? ", push" : "")
                + (poolKind() == dev.kvtransfer.api.memory.MemoryKind.DEVICE ? ", pools on CUDA device " + cudaDevice
                : "");
    }

    private String pool(String name) {
        PoolLayout.Kind k = PoolLayout.Kind.parse(name);
        if (k == PoolLayout.Kind.BLOCK && mlaRopeDim == 0) {
            return "";
        }
        return " " + k.cliName() + (k != PoolLayout.Kind.BLOCK && mlaRopeDim > 0 ? "+rope" + mlaRopeDim : "");
    }
}
