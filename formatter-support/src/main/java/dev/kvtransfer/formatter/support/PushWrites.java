package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.WriteBatch;

import java.util.function.IntFunction;

/**
 * The common end of a formatter's one-sided push: once every part has its {@link WritePlan} against the peer's pool
 * as the peer declared it, takes the staging the staged plans need from the session in one call and writes every
 * part on the session's peer threads through the grants ({@link PeerWriteSink}), recording each peer's measure.
 * Thread-safe: per-request state on the stack, one reusable write batch per thread.
 */
public final class PushWrites {
    /** One write batch per thread, cleared and refilled by every push (no batch per request). */
    private static final ThreadLocal<WriteBatch> BATCHES = ThreadLocal.withInitial(() -> new WriteBatch(1024));

    private PushWrites() {
    }

    /**
     * A push session or an {@code INTERNAL} failure: a formatter's {@code push} starts with it.
     *
     * @param session the transfer
     */
    public static void requirePushSession(TransferSession session) {
        if (!session.isPush()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "push on a session that is not a"
                    + " push session (no peer pools)", null);
        }
    }

    /**
     * Writes every planned part into its peer's pool; returns on remote completion of every entry.
     *
     * @param session the transfer
     * @param plans   write plans by peer position, null where the peer gets nothing
     * @param pools   the peers' pools by peer position (set where a plan is)
     * @param regions this rank's regions by index
     */
    public static void writeAll(TransferSession session, WritePlan[] plans, PeerPool[] pools,
                                IntFunction<MemoryBuffer> regions) {
        int active = 0;
        int staged = 0;
        for (WritePlan plan : plans) {
            if (plan != null) {
                active++;
                staged += plan.staged() ? 1 : 0;
            }
        }
        int[] peers = new int[active];
        long[] sizes = new long[staged];
        int k = 0;
        int j = 0;
        for (int p = 0; p < plans.length; p++) {
            if (plans[p] != null) {
                peers[k++] = p;
                if (plans[p].staged()) {
                    sizes[j++] = plans[p].stagingBytes();
                }
            }
        }
        MemoryBuffer[] staging = new MemoryBuffer[plans.length];
        if (staged > 0) {
            MemoryBuffer[] got = session.stagingBuffers(sizes);
            j = 0;
            for (int p : peers) {
                if (plans[p].staged()) {
                    staging[p] = got[j++];
                }
            }
        }
        BufferManager bm = session.bufferManager();
        session.forEachPeer(peers, p -> write(session, p, plans[p], pools[p], bm, regions, staging[p]));
    }

    /**
     * Writes one peer's part; returns on remote completion of every entry.
     *
     * @param session the transfer
     * @param p       the peer's position
     * @param plan    its part's plan
     * @param pool    its pool
     * @param bm      the copies' manager (staging)
     * @param regions this rank's regions by index
     * @param staging the part's staging (a staged plan), else null
     */
    public static void write(TransferSession session, int p, WritePlan plan, PeerPool pool, BufferManager bm,
                             IntFunction<MemoryBuffer> regions, MemoryBuffer staging) {
        long start = System.nanoTime();
        WriteBatch batch = BATCHES.get();
        try {
            PeerWriteSink sink = new PeerWriteSink(pool, batch, PeerWriteSink.DEFAULT_MAX_ENTRIES,
                    b -> session.write(p, b));
            plan.write(bm, regions, staging, sink);
            sink.flush();
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "writing " + plan + " into "
                    + "generation rank " + pool.rank() + " failed: " + e.getMessage(), e);
        } finally {
            batch.clear();
        }
        session.recordMeasure(p, start, System.nanoTime(), plan.bytes());
    }
}
