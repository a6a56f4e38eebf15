package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.LayerKind;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.model.WindowGroups;
import dev.kvtransfer.api.transport.Tags;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.function.Function;

/** Random valid model objects from a seeded {@link Random}, and the codec of each message type. */
final class Samples {
    private static final String ADDRESS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789:/.-_[]%é漢";

    private Samples() {
    }

    /** One message type: how to encode an object and decode bytes. */
    record Codec(String name, Function<byte[], Object> decode, Function<Object, byte[]> encode) {
    }

    static final List<Codec> CODECS = List.of(
            new Codec("CacheState", CacheState::fromBytes, o -> ((CacheState) o).toBytes()),
            new Codec("CommState", CommState::fromBytes, o -> ((CommState) o).toBytes()),
            new Codec("TransceiverState", TransceiverState::fromBytes, o -> ((TransceiverState) o).toBytes()),
            new Codec("RequestInfo", RequestInfo::fromBytes, o -> ((RequestInfo) o).toBytes()),
            new Codec("ContextPhaseParams", ContextPhaseParams::fromBytes, o -> ((ContextPhaseParams) o).toBytes()));

    static CacheState cacheState(Random rnd) {
        int tp = 1 << rnd.nextInt(4);
        int pp = 1 + rnd.nextInt(4);
        int cp = 1 << rnd.nextInt(3);
        boolean mla = rnd.nextInt(4) == 0;
        int layers = 1 + rnd.nextInt(24);
        CacheState.Builder b = CacheState.builder()
                .sizePerHead(1 + rnd.nextInt(512))
                .tokensPerBlock(1 + rnd.nextInt(128))
                .tensorParallelism(tp)
                .pipelineParallelism(pp)
                .contextParallelism(cp)
                .dataType(DataType.values()[rnd.nextInt(DataType.values().length)])
                .blockReuse(rnd.nextBoolean());
        if (rnd.nextBoolean()) {
            int dpSize = tp >> rnd.nextInt(Integer.numberOfTrailingZeros(tp) + 1);
            b.attentionDp(true, rnd.nextInt(dpSize), dpSize);
        }
        if (mla) {
            b.attentionType(AttentionType.MLA).uniformKvHeads(layers, 1);
        } else if (rnd.nextBoolean()) {
            b.uniformKvHeads(layers, 1 << rnd.nextInt(6));
        } else {
            List<Integer> heads = new ArrayList<>();
            for (int l = 0; l < layers; l++) {
                heads.add(1 << rnd.nextInt(6));
            }
            b.kvHeadsPerLayer(heads).kvFactor(1 + rnd.nextInt(2));
        }
        boolean hybrid = !mla && rnd.nextInt(4) == 0;
        if (hybrid) {
            // Recurrent layers at random places among the attention ones; all layers split over PP (or evenly).
            List<LayerKind> kinds = new ArrayList<>(Collections.nCopies(layers, LayerKind.ATTENTION));
            int recurrent = 1 + rnd.nextInt(8);
            for (int i = 0; i < recurrent; i++) {
                kinds.add(rnd.nextInt(kinds.size() + 1), LayerKind.RECURRENT);
            }
            List<Integer> split = rnd.nextBoolean() ? List.of() : randomSplit(rnd, kinds.size(), pp);
            DataType[] types = DataType.values();
            b.recurrentState(new RecurrentStateShape(kinds, split, tp * (1 + rnd.nextInt(64)), 1 + rnd.nextInt(4),
                    tp * (1 + rnd.nextInt(8)), 1 + rnd.nextInt(64), 1 + rnd.nextInt(128),
                    types[rnd.nextInt(types.length)], types[rnd.nextInt(types.length)]));
        } else if (rnd.nextBoolean()) {
            b.attentionLayersPerPp(randomSplit(rnd, layers, pp));
        }
        if (!mla && rnd.nextInt(4) == 0) {
            // Sliding windows (also on hybrids): a random window or full attention per attention layer.
            List<Integer> windows = new ArrayList<>(layers);
            for (int l = 0; l < layers; l++) {
                windows.add(rnd.nextInt(3) == 0 ? WindowGroups.UNLIMITED : 1 + rnd.nextInt(8192));
            }
            b.windowGroups(WindowGroups.of(windows));
        }
        return b.build();
    }

    /** A split of {@code layers} over {@code pp} ranks from random cut points; may contain zeros. */
    static List<Integer> randomSplit(Random rnd, int layers, int pp) {
        List<Integer> cuts = new ArrayList<>();
        for (int i = 0; i < pp - 1; i++) {
            cuts.add(rnd.nextInt(layers + 1));
        }
        return splitAt(cuts, layers);
    }

    static List<Integer> splitAt(List<Integer> cuts, int layers) {
        List<Integer> sorted = new ArrayList<>(cuts);
        Collections.sort(sorted);
        List<Integer> out = new ArrayList<>();
        int prev = 0;
        for (int c : sorted) {
            out.add(c - prev);
            prev = c;
        }
        out.add(layers - prev);
        return out;
    }

    static String string(Random rnd, int maxLength) {
        int n = rnd.nextInt(maxLength + 1);
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append(ADDRESS_CHARS.charAt(rnd.nextInt(ADDRESS_CHARS.length())));
        }
        return sb.toString();
    }

    static CommState commState(Random rnd, int ranks) {
        List<String> addresses = new ArrayList<>(ranks);
        for (int i = 0; i < ranks; i++) {
            addresses.add(string(rnd, 32));
        }
        return new CommState(string(rnd, 12), addresses, rnd.nextInt(ranks + 1) - 1);
    }

    static TransceiverState transceiverState(Random rnd) {
        CacheState cache = cacheState(rnd);
        return new TransceiverState(cache, commState(rnd, cache.worldSize()));
    }

    static long[] longs(Random rnd, int max) {
        long[] out = new long[rnd.nextInt(max + 1)];
        for (int i = 0; i < out.length; i++) {
            out[i] = rnd.nextLong();
        }
        return out;
    }

    static RequestInfo requestInfo(Random rnd) {
        return new RequestInfo(rnd.nextLong(), rnd.nextInt(1000) - 1, longs(rnd, 16), transceiverState(rnd),
                Tags.FIRST_DATA_TAG + rnd.nextInt(Integer.MAX_VALUE - Tags.FIRST_DATA_TAG),
                rnd.nextBoolean() ? 0 : rnd.nextLong() & Long.MAX_VALUE);
    }

    static ContextPhaseParams contextPhaseParams(Random rnd) {
        return new ContextPhaseParams(rnd.nextLong(), longs(rnd, 8), transceiverState(rnd));
    }

    /** A random valid object of the codec's type. */
    static Object sample(Codec codec, Random rnd) {
        switch (codec.name()) {
            case "CacheState":
                return cacheState(rnd);
            case "CommState":
                return commState(rnd, 1 + rnd.nextInt(16));
            case "TransceiverState":
                return transceiverState(rnd);
            case "RequestInfo":
                return requestInfo(rnd);
            case "ContextPhaseParams":
                return contextPhaseParams(rnd);
            default:
                throw new IllegalArgumentException(codec.name());
        }
    }
}
