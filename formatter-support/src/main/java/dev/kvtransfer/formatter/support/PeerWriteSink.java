package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.WriteBatch;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * A {@link WritePlan.Sink} that adds a plan's entries to a reusable {@link WriteBatch} through a peer's
 * {@link PeerPool} ({@link PeerPool#add}, which refuses bytes the peer did not grant), splits an entry that
 * crosses from one grant into the next (a plan merges by memory contiguity; a peer may have registered adjacent
 * bytes as separate grants), and hands the batch to a writer whenever it holds {@code maxEntries} entries and on
 * {@link #flush()}.
 *
 * <p>One per peer and call (O(1) objects); the batch is cleared after every write. Not thread-safe.
 */
public final class PeerWriteSink implements WritePlan.Sink {
    /** Default entries per write: 16 Ki (about 640 KiB of batch arrays). */
    public static final int DEFAULT_MAX_ENTRIES = 16 * 1024;

    private final PeerPool pool;
    private final WriteBatch batch;
    private final int maxEntries;
    private final Consumer<WriteBatch> writer;
    private final List<PeerPool.Grant> grants;
    private long bytes;
    private long entries;
    private int writes;

    /**
     * A sink.
     *
     * @param pool       the peer's pool
     * @param batch      a batch to fill (cleared first)
     * @param maxEntries entries after which the batch is written, at least 1
     * @param writer     writes a batch and returns on its remote completion (e.g. {@code b -> session.write(p, b)})
     */
    public PeerWriteSink(PeerPool pool, WriteBatch batch, int maxEntries, Consumer<WriteBatch> writer) {
        this.pool = Objects.requireNonNull(pool, "pool");
        this.batch = Objects.requireNonNull(batch, "batch");
        this.writer = Objects.requireNonNull(writer, "writer");
        if (maxEntries < 1) {
            throw new IllegalArgumentException("maxEntries = " + maxEntries + ": must be at least 1");
        }
        this.maxEntries = maxEntries;
        batch.clear();
        List<PeerPool.Grant> g = pool.grants();
        if (!sorted(g)) {
            List<PeerPool.Grant> copy = new ArrayList<>(g);
            copy.sort(Comparator.comparingInt(PeerPool.Grant::region).thenComparingLong(PeerPool.Grant::offset));
            g = copy;
        }
        this.grants = g;
    }

    private static boolean sorted(List<PeerPool.Grant> g) {
        for (int i = 1; i < g.size(); i++) {
            PeerPool.Grant a = g.get(i - 1);
            PeerPool.Grant b = g.get(i);
            if (a.region() > b.region() || a.region() == b.region() && a.offset() > b.offset()) {
                return false;
            }
        }
        return true;
    }

    @Override
    public void entry(MemoryBuffer source, long sourceOffset, int region, long regionOffset, long length) {
        long s = sourceOffset;
        long off = regionOffset;
        long left = length;
        while (left > 0) {
            PeerPool.Grant g = find(region, off);
            // Without a grant there, PeerPool.add refuses the whole rest with the peer's grants in the message.
            long n = g == null ? left : Math.min(left, g.end() - off);
            pool.add(batch, source, s, region, off, n);
            entries++;
            if (batch.size() >= maxEntries) {
                write();
            }
            s += n;
            off += n;
            left -= n;
        }
    }

    @Override
    public void flush() {
        if (batch.size() > 0) {
            write();
        }
    }

    private void write() {
        writer.accept(batch);
        bytes += batch.totalBytes();
        writes++;
        batch.clear();
    }

    /** @return bytes written so far (flushed batches) */
    public long bytes() {
        return bytes;
    }

    /** @return entries added so far */
    public long entries() {
        return entries;
    }

    /** @return batches written so far */
    public int writes() {
        return writes;
    }

    /** The grant holding byte {@code offset} of {@code region}, or null. */
    private PeerPool.Grant find(int region, long offset) {
        int lo = 0;
        int hi = grants.size() - 1;
        PeerPool.Grant best = null;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            PeerPool.Grant g = grants.get(mid);
            if (g.region() < region || g.region() == region && g.offset() <= offset) {
                if (g.region() == region) {
                    best = g;
                }
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return best != null && offset < best.end() ? best : null;
    }
}
