package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.SharedMappings;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.ConnectionManager;

import java.util.List;

/**
 * Whether a generation rank moves a pull request through one-copy writes: it registers push grants as a push
 * would, so the context ranks' formatters write straight into its pool (the re-shard scatter inside the writes)
 * instead of sending messages its formatter receives and scatters.
 *
 * <p>The rule is a function of what every rank of a request sees alike, so that the generation ranks of one
 * request agree without a message (the context side refuses a request whose generation ranks disagree on push):
 * the formatter pushes, this rank's pool lies in shared files, and the transport
 * expects one copy from <em>every</em> rank of both instances ({@link ConnectionManager#oneCopyWritesFrom}), not
 * only from this rank's counterparts. An instance with a rank on another host therefore pulls everywhere. The
 * settings that switch the path (the transport's, the deployment secret, {@code kvtransfer.memory.sharedPools})
 * must be alike on every generation rank, as {@code kvtransfer.transferMode} must.
 *
 * <p>A request smaller than {@code kvtransfer.localOneCopyMinBytes} pulls as messages: registering grants and
 * writing through them costs more than a message for a few blocks. The size is the blocks to move times the whole
 * model's KV bytes per block (every layer and KV head of the context state), not this rank's share, which differs
 * between the ranks of uneven PP stages and would split their answer.
 *
 * <p>Thread-safe: the last answer is remembered per pair of states (states are reused between requests), racily
 * but harmlessly.
 */
final class LocalOneCopy {
    private final TransferEnv env;
    private volatile Boolean poolShared;
    private volatile Memo last;

    private record Memo(TransceiverState self, TransceiverState peer, boolean local, long blockBytes) {
    }

    LocalOneCopy(TransferEnv env) {
        this.env = env;
    }

    /**
     * @param ctx the context instance's state (its addresses and cache shape)
     * @param blocks the request's blocks to move (prompt blocks less reused ones), alike on every generation rank
     * @return whether a pull request to that instance moves as one-copy writes
     */
    boolean applies(TransceiverState ctx, int blocks) {
        if (!env.formatter().capabilities().contains(FormatterCapability.PUSH) || !poolShared()) {
            return false;
        }
        TransceiverState self = env.selfState();
        Memo m = last;
        if (m == null || m.self != self || m.peer != ctx) {
            boolean local = allLocal(self.commState().addresses()) && allLocal(ctx.commState().addresses());
            m = new Memo(self, ctx, local, modelBlockBytes(ctx.cacheState()));
            last = m;
        }
        return m.local && reaches(blocks, m.blockBytes, env.config().localOneCopyMinBytes());
    }

    /** Whether {@code blocks * blockBytes >= floor}, without overflow. */
    private static boolean reaches(int blocks, long blockBytes, long floor) {
        return floor <= 0 || blocks > 0 && blockBytes > 0 && blocks > (floor - 1) / blockBytes;
    }

    /**
     * The whole model's KV bytes in one block, the same for every rank of either instance: every layer's KV heads,
     * kv planes, tokens per block and elements; {@link Long#MAX_VALUE} if it overflows.
     */
    private static long modelBlockBytes(CacheState s) {
        long heads = 0;
        for (int h : s.kvHeadsPerLayer()) {
            heads += h;
        }
        try {
            return Math.multiplyExact(Math.multiplyExact(Math.multiplyExact(heads, s.kvFactor()),
                    (long) s.tokensPerBlock() * s.sizePerHead()), s.dataType().bytes());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    private boolean allLocal(List<String> addresses) {
        if (addresses.isEmpty()) {
            return false;
        }
        ConnectionManager m = env.connections();
        for (String a : addresses) {
            try {
                if (!m.oneCopyWritesFrom(a)) {
                    return false;
                }
            } catch (IllegalArgumentException notThisTransports) {
                return false;
            }
        }
        return true;
    }

    /** Whether every region of this rank's pool lies in a shared file (a pool in device memory never does). */
    private boolean poolShared() {
        Boolean p = poolShared;
        if (p == null) {
            p = true;
            var cache = env.cache();
            for (int r = 0; r < cache.regionCount() && p; r++) {
                MemoryBuffer b = cache.region(r);
                p = b.kind() != MemoryKind.DEVICE && SharedMappings.find(b.address(), b.size()) != null;
            }
            poolShared = p;
        }
        return p;
    }
}
