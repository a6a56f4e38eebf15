package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.SharedMappings;
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
 * <p>Thread-safe: the last answer is remembered per pair of states (states are reused between requests), racily
 * but harmlessly.
 */
final class LocalOneCopy {
    private final TransferEnv env;
    private volatile Boolean poolShared;
    private volatile Memo last;

    private record Memo(TransceiverState self, TransceiverState peer, boolean local) {
    }

    LocalOneCopy(TransferEnv env) {
        this.env = env;
    }

    /**
     * @param ctx the context instance's state (its addresses)
     * @return whether a pull request to that instance moves as one-copy writes
     */
    boolean applies(TransceiverState ctx) {
        if (!env.formatter().capabilities().contains(FormatterCapability.PUSH) || !poolShared()) {
            return false;
        }
        TransceiverState self = env.selfState();
        Memo m = last;
        if (m != null && m.self == self && m.peer == ctx) {
            return m.local;
        }
        boolean local = allLocal(self.commState().addresses()) && allLocal(ctx.commState().addresses());
        last = new Memo(self, ctx, local);
        return local;
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
