package dev.kvtransfer.bench;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.DataType;

import java.util.Arrays;
import java.util.Locale;
import java.util.stream.Collectors;

/**
 * KV-cache shapes of well-known models for {@code --model}: the same table as the cli's {@code ModelPreset} (copied:
 * the bench depends on api and core only), plus the attention type, so that the KV bytes per token follow from the
 * shape: {@code layers x kvFactor x kvHeads x sizePerHead x dtype bytes}.
 */
public enum BenchModel {
    /** A tiny model: 16 KiB blocks of 16 tokens (4 layers x 2 x 4 heads x 16 x fp16), the control-plane probe. */
    TINY("tiny", 4, 4, 16, 16, DataType.FLOAT16, AttentionType.DEFAULT),
    /** Llama 3 8B: 32 layers, 8 KV heads (GQA), head size 128, bf16: 128 KiB per token. */
    LLAMA3_8B("llama3-8b", 32, 8, 128, 32, DataType.BFLOAT16, AttentionType.DEFAULT),
    /** Llama 3 70B: 80 layers, 8 KV heads, head size 128: 320 KiB per token. */
    LLAMA3_70B("llama3-70b", 80, 8, 128, 32, DataType.BFLOAT16, AttentionType.DEFAULT),
    /** Qwen2.5 7B: 28 layers, 4 KV heads, head size 128: 56 KiB per token. */
    QWEN25_7B("qwen2.5-7b", 28, 4, 128, 32, DataType.BFLOAT16, AttentionType.DEFAULT),
    /** DeepSeek-V3-like MLA cache: 61 layers, one latent head of 576 (512 + 64 rope), K only. */
    DEEPSEEK_V3("deepseek-v3", 61, 1, 576, 64, DataType.BFLOAT16, AttentionType.MLA);

    final String id;
    final int layers;
    final int kvHeads;
    final int sizePerHead;
    final int tokensPerBlock;
    final DataType dataType;
    final AttentionType attention;

    BenchModel(String id, int layers, int kvHeads, int sizePerHead, int tokensPerBlock, DataType dataType,
            AttentionType attention) {
        this.id = id;
        this.layers = layers;
        this.kvHeads = kvHeads;
        this.sizePerHead = sizePerHead;
        this.tokensPerBlock = tokensPerBlock;
        this.dataType = dataType;
        this.attention = attention;
    }

    /** @return the preset's name on the command line */
    public String id() {
        return id;
    }

    /** @return KV bytes of one token over all layers */
    public long kvBytesPerToken() {
        int kvFactor = attention == AttentionType.MLA ? 1 : 2;
        return (long) layers * kvFactor * kvHeads * sizePerHead * dataType.bytes();
    }

    /**
     * @param id a preset name, case-insensitive
     * @return the preset
     * @throws IllegalArgumentException naming the known presets
     */
    public static BenchModel byId(String id) {
        for (BenchModel p : values()) {
            if (p.id.equals(id.toLowerCase(Locale.ROOT))) {
                return p;
            }
        }
        throw new IllegalArgumentException("unknown model preset '" + id + "'; known: "
                + Arrays.stream(values()).map(p -> p.id).collect(Collectors.joining(", ")));
    }
}
