package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.cache.RecurrentStateView;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * The pattern over a rank's recurrent states (see {@link KvPattern#fillRecurrent}): every element's value is
 * {@code KvPattern.value} of its global coordinates, so any TP / PP split on the receiving side checks against the
 * same numbers.
 */
final class RecurrentPattern {
    private RecurrentPattern() {
    }

    /** Writes ({@code result == null}) or checks the states of one request on one rank. */
    static void walk(RecurrentStateView view, CacheState state, int rank, long requestId, long patternId,
                     KvPattern.Result result) {
        walk(view, null, state, rank, requestId, patternId, result);
    }

    /**
     * As {@link #walk(RecurrentStateView, CacheState, int, long, long, KvPattern.Result)}; states in device memory
     * go through a host mirror, copied with {@code copier} (device to host before a check, host to device after a
     * fill).
     */
    static void walk(RecurrentStateView view, BufferManager copier, CacheState state, int rank, long requestId,
                     long patternId, KvPattern.Result result) {
        Objects.requireNonNull(view, "view");
        try (HostBufferManager mirrors = new HostBufferManager()) {
            walk(view, copier, mirrors, state, rank, requestId, patternId, result);
        }
    }

    private static void walk(RecurrentStateView view, BufferManager copier, HostBufferManager mirrors,
                             CacheState state, int rank, long requestId, long patternId, KvPattern.Result result) {
        RecurrentStateShape s = Objects.requireNonNull(state.recurrentState(), "state.recurrentState()");
        int pp = state.ppRank(rank);
        int tp = state.tensorParallelism();
        int tpRank = state.tpRank(rank);
        int first = s.firstRecurrentLayer(pp);
        int channels = s.convChannelsPerRank(tp);
        int heads = s.ssmHeadsPerRank(tp);
        for (int i = 0; i < s.recurrentLayerCount(pp); i++) {
            int layer = first + i;
            Mirror convM = new Mirror(view.convState(requestId, i), copier, mirrors, result == null, requestId);
            ByteBuffer conv = convM.bytes;
            int cw = s.convDataType().bytes();
            for (int c = 0; c < channels; c++) {
                int global = tpRank * channels + c;
                for (int w = 0; w < s.convWidth(); w++) {
                    int at = (c * s.convWidth() + w) * cw;
                    long v = KvPattern.value(patternId, layer, KvPattern.CONV_KV, global, w, 0);
                    element(conv, at, cw, v, result, "conv", layer, global, w, 0);
                }
            }
            convM.done();
            Mirror ssmM = new Mirror(view.ssmState(requestId, i), copier, mirrors, result == null, requestId);
            ByteBuffer ssm = ssmM.bytes;
            int sw = s.ssmDataType().bytes();
            for (int h = 0; h < heads; h++) {
                int global = tpRank * heads + h;
                for (int p = 0; p < s.ssmHeadDim(); p++) {
                    for (int n = 0; n < s.ssmStateDim(); n++) {
                        int at = ((h * s.ssmHeadDim() + p) * s.ssmStateDim() + n) * sw;
                        long v = KvPattern.value(patternId, layer, KvPattern.SSM_KV, global, p, n);
                        element(ssm, at, sw, v, result, "ssm", layer, global, p, n);
                    }
                }
            }
            ssmM.done();
        }
    }

    /** A state's bytes for the CPU: the state itself in host memory, else a host copy of a device state. */
    private static final class Mirror {
        final ByteBuffer bytes;
        private final MemoryBuffer state;
        private final MemoryBuffer copy;
        private final BufferManager copier;
        private final boolean fill;

        Mirror(MemoryBuffer state, BufferManager copier, HostBufferManager mirrors, boolean fill, long requestId) {
            this.state = state;
            this.copier = copier;
            this.fill = fill;
            if (state.kind() != MemoryKind.DEVICE) {
                this.copy = null;
                this.bytes = state.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
                return;
            }
            if (copier == null) {
                throw new IllegalArgumentException("request " + requestId + ": recurrent states in device memory"
                        + " need a BufferManager to copy them through host memory");
            }
            this.copy = mirrors.allocate(Math.max(1, state.size()), MemoryKind.HOST);
            if (!fill) {
                copier.copy(state, 0, copy, 0, state.size());
                copier.synchronize();
            }
            this.bytes = copy.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
        }

        void done() {
            if (copy == null) {
                return;
            }
            if (fill) {
                copier.copy(copy, 0, state, 0, state.size());
                copier.synchronize();
            }
            copy.close();
        }
    }

    private static void element(ByteBuffer b, int at, int width, long v, KvPattern.Result result, String what,
                                int layer, int head, int i, int j) {
        if (result == null) {
            switch (width) {
                case 1 -> b.put(at, (byte) v);
                case 2 -> b.putShort(at, (short) v);
                case 4 -> b.putInt(at, (int) v);
                default -> b.putLong(at, v);
            }
            return;
        }
        long actual = switch (width) {
            case 1 -> b.get(at);
            case 2 -> b.getShort(at);
            case 4 -> b.getInt(at);
            default -> b.getLong(at);
        };
        long mask = width == 8 ? -1L : (1L << (8 * width)) - 1;
        result.checked++;
        if ((actual & mask) != (v & mask)) {
            if (result.mismatches++ == 0) {
                result.first = what + " state: recurrent layer " + layer + " head/channel " + head + " [" + i + "]["
                        + j + "] byte " + at + ": expected 0x" + Long.toHexString(v & mask) + ", found 0x"
                        + Long.toHexString(actual & mask);
            }
        }
    }
}
