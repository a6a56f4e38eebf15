package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

/** KV-cache shapes of well-known models (attention layers, KV heads, head size), for {@code --model}. */
public enum ModelPreset {
    /** A tiny model for quick checks. */
    TINY("tiny", 4, 4, 16, 16, DataType.FLOAT16),
    /** Llama 3 8B: 32 layers, 8 KV heads (GQA), head size 128. */
    LLAMA3_8B("llama3-8b", 32, 8, 128, 32, DataType.BFLOAT16),
    /** Llama 3 70B: 80 layers, 8 KV heads, head size 128. */
    LLAMA3_70B("llama3-70b", 80, 8, 128, 32, DataType.BFLOAT16),
    /** Qwen2.5 7B: 28 layers, 4 KV heads, head size 128. */
    QWEN25_7B("qwen2.5-7b", 28, 4, 128, 32, DataType.BFLOAT16),
    /** DeepSeek-V3-like MLA cache: 61 layers, one latent head of 576 (512 + 64 rope). */
    DEEPSEEK_V3("deepseek-v3", 61, 1, 576, 64, DataType.BFLOAT16),
    /**
     * The cache shape of Qwen3-Next-80B-A3B, a hybrid: 48 layers, three Gated DeltaNet layers then one gated
     * attention layer, repeated; the 12 attention layers have 2 KV heads of 256; each of the 36 recurrent layers keeps
     * a conv state of 8192 channels x 3 and a state of 32 heads x 128 x 128 per request (BF16 throughout here).
     */
    QWEN3_NEXT_SHAPE("qwen3-next-shape", 12, 2, 256, 64, DataType.BFLOAT16,
            new RecurrentStateShape(RecurrentStateShape.kinds("RRRA", 12), List.of(), 8192, 3, 32, 128, 128,
                    DataType.BFLOAT16, DataType.BFLOAT16)),
    /**
     * The cache shape of Gemma 3 12B, with sliding-window attention: 48 layers of 8 KV heads of 256, five local layers
     * with a 1024-token window then one global (full-attention) layer, repeated; only the blocks inside each local
     * layer's window move.
     */
    GEMMA3_SHAPE("gemma3-shape", 48, 8, 256, 32, DataType.BFLOAT16, null, List.of(1024, 1024, 1024, 1024, 1024,
            WindowGroups.UNLIMITED));

    final String id;
    final int layers;
    final int kvHeads;
    final int sizePerHead;
    final int tokensPerBlock;
    final DataType dataType;
    /** The recurrent layers of a hybrid model, or {@code null}. */
    final RecurrentStateShape recurrent;
    /** One period of the attention layers' windows (VSWA), repeated over the layers, or {@code null}. */
    final List<Integer> windowPattern;

    ModelPreset(String id, int layers, int kvHeads, int sizePerHead, int tokensPerBlock, DataType dataType) {
        this(id, layers, kvHeads, sizePerHead, tokensPerBlock, dataType, null);
    }

    ModelPreset(String id, int layers, int kvHeads, int sizePerHead, int tokensPerBlock, DataType dataType,
                RecurrentStateShape recurrent) {
        this(id, layers, kvHeads, sizePerHead, tokensPerBlock, dataType, recurrent, null);
    }

    ModelPreset(String id, int layers, int kvHeads, int sizePerHead, int tokensPerBlock, DataType dataType,
                RecurrentStateShape recurrent, List<Integer> windowPattern) {
        this.recurrent = recurrent;
        this.windowPattern = windowPattern;
        this.id = id;
        this.layers = layers;
        this.kvHeads = kvHeads;
        this.sizePerHead = sizePerHead;
        this.tokensPerBlock = tokensPerBlock;
        this.dataType = dataType;
    }

    static ModelPreset byId(String id) {
        for (ModelPreset p : values()) {
            if (p.id.equals(id.toLowerCase(Locale.ROOT))) {
                return p;
            }
        }
        throw new IllegalArgumentException("unknown model preset '" + id + "'; known: "
                + Arrays.stream(values()).map(p -> p.id).collect(Collectors.joining(", ")));
    }
}
