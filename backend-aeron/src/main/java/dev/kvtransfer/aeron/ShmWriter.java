package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import org.agrona.IoUtil;
import org.agrona.concurrent.UnsafeBuffer;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.time.Duration;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.zip.CRC32C;

/**
 * The writer side of one-copy writes between processes of one host ({@link ShmOwner}): for an entry whose region
 * descriptor carries the owner's shared-memory marker, it asks the owner once per region for the pool file, the
 * grant's place in it and a revocation slot, maps the file (once per file), and copies the entry's bytes straight
 * into the owner's pool, in pieces of {@value #PIECE} bytes, each inside the slot ({@link ShmFence#enter}). What it
 * cannot place that way (another host, the owner refused to share, a private region) goes to the emulated path.
 *
 * <p>A grant whose key carries this writer's slot ({@link ShmOwner#KEY_HEADER}) in a pool file and a fence it mapped
 * through an earlier exchange with the same owner needs no exchange: it is written at once ({@link #inKey}).
 */
final class ShmWriter implements AutoCloseable {
    /** Bytes copied under one entry into the fence: bounds how long an owner's revocation waits for a copy. */
    static final long PIECE = 8L << 20;
    /**
     * Bytes copied, then summed, at once when the writer sums what it writes: the CRC32C reads the chunk it just
     * placed from the core's L2 instead of the source from memory (formatter-standard's sweep picked the same size).
     */
    static final int SUM_CHUNK = 128 << 10;
    /** Regions remembered per peer before the memory of them is dropped (grants live as long as a request). */
    private static final int MAX_REMEMBERED = 4096;
    private static final long PID = ProcessHandle.current().pid();
    /** The smallest page size: every page of a mapped pool file is touched once at that stride. */
    private static final int POPULATE_STRIDE = 4096;

    /** Bytes copied into peers' pools by every writer of this process (tests read it). */
    private static final java.util.concurrent.atomic.AtomicLong COPIED = new java.util.concurrent.atomic.AtomicLong();
    private final String name;
    private final java.util.function.Supplier<String> self;
    private long selfTag;
    private final Map<String, PeerState> peers = new ConcurrentHashMap<>();
    private final Map<String, Mapped> files = new ConcurrentHashMap<>();
    private final Map<String, ShmFence> fences = new ConcurrentHashMap<>();
    /** Copies hold it shared; closing takes it exclusively before it unmaps anything. */
    private final ReentrantReadWriteLock mappings = new ReentrantReadWriteLock();
    private final ThreadLocal<UnsafeBuffer> sourceView = ThreadLocal.withInitial(UnsafeBuffer::new);
    private final ThreadLocal<CRC32C> sums = ThreadLocal.withInitial(CRC32C::new);
    /** Per thread, a view of the last pool file it summed in (a view object per entry otherwise). */
    private final ThreadLocal<Placed> placedViews = ThreadLocal.withInitial(Placed::new);

    private static final class Placed {
        Mapped file;
        ByteBuffer view;

        ByteBuffer of(Mapped m) {
            if (file != m) {
                file = m;
                view = m.buffer().duplicate();
            }
            return view;
        }
    }
    private volatile boolean closed;

    /**
     * @param name the manager's name, for messages
     * @param self this manager's address (as its peers know it: the writer entries of keys are named by it)
     */
    ShmWriter(String name, java.util.function.Supplier<String> self) {
        this.name = name;
        this.self = self;
    }

    /** Where a region's bytes are, or that they are not reachable from here. */
    private record Target(Mapped file, long fileOffset, long length, ShmFence fence, int slot, int generation,
                          RegionDescriptor emulated) {
        boolean shared() {
            return file != null;
        }
    }

    /** A peer's pool file mapped here; {@code gone} is set (under the write lock) when it is unmapped. */
    private static final class Mapped {
        final String path;
        final MappedByteBuffer buffer;
        final UnsafeBuffer view;
        volatile boolean gone;

        Mapped(String path, MappedByteBuffer buffer, UnsafeBuffer view) {
            this.path = path;
            this.buffer = buffer;
            this.view = view;
        }

        MappedByteBuffer buffer() {
            return buffer;
        }

        UnsafeBuffer view() {
            return view;
        }
    }

    /** Per peer: the map exchange is one at a time, its answers are remembered. */
    private static final class PeerState {
        final ReentrantLock lock = new ReentrantLock();
        final Map<Long, Target> byRegion = new ConcurrentHashMap<>();
        final OffHeapBuffer request = OffHeapBuffer.allocate(ShmOwner.REQUEST_BYTES);
        final OffHeapBuffer reply = OffHeapBuffer.allocate(ShmOwner.REPLY_BYTES);
        long nextRequest = 1;
        /** The owner's fence and pool files this writer mapped through an exchange: what {@link #inKey} needs. */
        volatile ShmFence fence;
        final Map<Integer, Mapped> fileById = new ConcurrentHashMap<>();
    }

    /** @return bytes copied into peers' pools by the writers of this process so far */
    static long copiedBytes() {
        return COPIED.get();
    }

    /** @return whether the descriptor names a region its owner may share with this host */
    static boolean marked(RegionDescriptor d) {
        byte[] k = d.key();
        return k.length >= ShmOwner.KEY_BYTES
                && ByteBuffer.wrap(k).order(ByteOrder.LITTLE_ENDIAN).getInt(16) == ShmOwner.MAGIC;
    }

    /** The descriptor as the emulated path knows it (its 16-byte key). */
    static RegionDescriptor emulated(RegionDescriptor d) {
        return new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(), Arrays.copyOf(d.key(), 16));
    }

    /**
     * Copies what it can of a batch straight into the peer's pool; adds the rest to {@code rest}.
     *
     * @param c        the connection to the owner
     * @param batch    the entries (already checked against their descriptors)
     * @param deadline {@code System.nanoTime()} deadline
     * @param rest     receives the entries for the emulated path
     * @param crc32c   null, or receives each entry's CRC32C (host sources only): of the bytes as placed, chunk by
     *                 chunk right behind the copy here; of the source, in a pass of its own, for the emulated entries
     * @return bytes copied here
     */
    long write(Connection c, WriteBatch batch, long deadline, WriteBatch rest, int[] crc32c) {
        String peer = c.peer();
        long copied = 0;
        PeerState ps = null;
        RegionDescriptor lastChecked = null; // a batch's entries mostly share a descriptor: check its key once
        boolean lastMarked = false;
        for (int i = 0; i < batch.size(); i++) {
            RegionDescriptor d = batch.target(i);
            if (d != lastChecked) {
                lastChecked = d;
                lastMarked = marked(d);
            }
            if (!lastMarked || closed || !d.owner().equals(peer) || batch.source(i).kind() == MemoryKind.DEVICE) {
                rest.add(batch.source(i), batch.sourceOffset(i), lastMarked ? emulated(d) : d, batch.targetOffset(i),
                        batch.length(i));
                sumApart(batch, i, crc32c);
                continue;
            }
            if (ps == null) {
                ps = peers.computeIfAbsent(peer, k -> new PeerState());
            }
            Target t = ps.byRegion.get(d.regionId());
            if (t == null && (t = inKey(ps, d)) == null) {
                t = ask(c, ps, d, deadline);
            }
            if (!t.shared()) {
                rest.add(batch.source(i), batch.sourceOffset(i), t.emulated(), batch.targetOffset(i),
                        batch.length(i));
                sumApart(batch, i, crc32c);
                continue;
            }
            CRC32C sum = null;
            if (crc32c != null) {
                sum = sums.get();
                sum.reset();
            }
            copy(ps, d, t, batch.source(i), batch.sourceOffset(i), batch.targetOffset(i), batch.length(i), peer, sum);
            if (sum != null) {
                crc32c[i] = (int) sum.getValue();
            }
            copied += batch.length(i);
        }
        COPIED.addAndGet(copied);
        return copied;
    }

    /** An entry that goes emulated is summed here, in a pass of its own (its bytes are copied later). */
    private void sumApart(WriteBatch batch, int i, int[] crc32c) {
        if (crc32c == null) {
            return;
        }
        CRC32C sum = sums.get();
        sum.reset();
        MemoryBuffer src = batch.source(i);
        for (long pos = 0; pos < batch.length(i); pos += PIECE) {
            long n = Math.min(PIECE, batch.length(i) - pos);
            sum.update(src.slice(batch.sourceOffset(i) + pos, n).asByteBuffer());
        }
        crc32c[i] = (int) sum.getValue();
    }

    private void copy(PeerState ps, RegionDescriptor d, Target t, MemoryBuffer src, long srcOffset, long offset,
                      long length, String peer, CRC32C sum) {
        if (offset < 0 || length < 0 || offset > t.length() || length > t.length() - offset) {
            throw new TransportException(ErrorCode.MALFORMED, "write to " + peer + ": " + length + " bytes at offset "
                    + offset + " leave region #" + d.regionId() + " of " + t.length() + " bytes");
        }
        UnsafeBuffer from = sourceView.get();
        long srcAddress = src.address() + srcOffset;
        for (long pos = 0; pos < length; pos += PIECE) {
            int n = (int) Math.min(PIECE, length - pos);
            if (!mappings.readLock().tryLock()) {
                throw closedError(peer);
            }
            try {
                if (closed) {
                    throw closedError(peer);
                }
                if (t.file().gone || !t.fence().isOpen() || !t.fence().enter(t.slot(), t.generation())) {
                    ps.byRegion.remove(d.regionId());
                    throw new TransportException(ErrorCode.CANCELLED, "write to " + peer + ": region #"
                            + d.regionId() + " was deregistered (its grant was revoked)");
                }
                try {
                    from.wrap(srcAddress + pos, n);
                    int at = (int) (t.fileOffset() + offset + pos);
                    if (sum == null) {
                        t.file().view().putBytes(at, from, 0, n);
                    } else {
                        // Copy a chunk, then sum what landed while it is in the cache: the sum reads no memory.
                        ByteBuffer placed = placedViews.get().of(t.file());
                        for (int c = 0; c < n; c += SUM_CHUNK) {
                            int m = Math.min(SUM_CHUNK, n - c);
                            t.file().view().putBytes(at + c, from, c, m);
                            placed.limit(at + c + m).position(at + c);
                            sum.update(placed);
                        }
                    }
                } finally {
                    t.fence().exit(t.slot());
                }
            } finally {
                mappings.readLock().unlock();
            }
        }
        from.wrap(0, 0);
    }

    private TransportException closedError(String peer) {
        return new TransportException(ErrorCode.NETWORK, name + ": write to " + peer + ": the manager is closing");
    }

    /**
     * A grant whose key hands this writer a slot, in a file and under a fence this writer mapped for the same owner:
     * its target, without an exchange; null when the key does not say enough (the writer then asks).
     */
    private Target inKey(PeerState ps, RegionDescriptor d) {
        byte[] k = d.key();
        ShmFence f = ps.fence;
        if (k.length < ShmOwner.KEY_HEADER || f == null) {
            return null;
        }
        ByteBuffer b = ByteBuffer.wrap(k).order(ByteOrder.LITTLE_ENDIAN);
        int n = b.getInt(32);
        if (n <= 0 || n > ShmOwner.MAX_KEY_WRITERS || k.length < ShmOwner.KEY_HEADER + n * ShmOwner.WRITER_ENTRY) {
            return null;
        }
        Mapped m = ps.fileById.get(b.getInt(20));
        long fileOffset = b.getLong(24);
        long length = d.length();
        if (m == null || fileOffset < 0 || length < 0 || fileOffset > m.view().capacity()
                || length > m.view().capacity() - fileOffset) {
            return null;
        }
        long tag = selfTag();
        for (int i = 0; i < n; i++) {
            int at = ShmOwner.KEY_HEADER + i * ShmOwner.WRITER_ENTRY;
            if (b.getLong(at) != tag) {
                continue;
            }
            int slot = b.getInt(at + 8);
            if (slot < 0 || slot >= ShmFence.SLOTS || !mappings.readLock().tryLock()) {
                return null;
            }
            try {
                if (closed || m.gone || !f.isOpen()) {
                    return null;
                }
                f.claim(slot, PID, ShmOwner.PID_NAMESPACE); // before the first piece: the owner can tell it is gone
            } finally {
                mappings.readLock().unlock();
            }
            return remember(ps, d, new Target(m, fileOffset, length, f, slot, b.getInt(at + 12), emulated(d)));
        }
        return null;
    }

    private long selfTag() {
        long t = selfTag;
        if (t == 0) {
            t = ShmOwner.writerTag(self.get());
            selfTag = t;
        }
        return t;
    }

    /** Asks the owner for a region's place in its pool; one exchange per peer at a time. */
    private Target ask(Connection c, PeerState ps, RegionDescriptor d, long deadline) {
        String peer = c.peer();
        dropVanished();
        try {
            if (!ps.lock.tryLock(left(deadline, peer), TimeUnit.NANOSECONDS)) {
                throw new TransportException(ErrorCode.TIMEOUT, "write to " + peer + ": another shared-memory grant "
                        + "request to the same peer did not finish in time");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "write to " + peer + ": interrupted");
        }
        try {
            Target known = ps.byRegion.get(d.regionId());
            if (known != null) {
                return known;
            }
            long id = ps.nextRequest++;
            ByteBuffer q = ps.request.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            q.putInt(0, ShmOwner.MAGIC);
            q.putInt(4, 0);
            q.putLong(8, id);
            q.putLong(16, d.regionId());
            q.put(24, d.key(), 0, 16);
            q.putLong(40, PID);
            q.putLong(48, d.address());
            q.putLong(56, ShmOwner.PID_NAMESPACE);
            c.send(ShmOwner.MAP_REQUEST_TAG, ps.request, 0, ShmOwner.REQUEST_BYTES, remaining(deadline, peer));
            ByteBuffer a = ps.reply.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            do {
                // A reply to an earlier request that timed out here is skipped.
                c.recv(ShmOwner.MAP_REPLY_TAG, ps.reply, 0, ShmOwner.REPLY_BYTES, remaining(deadline, peer));
            } while (a.getLong(0) < id);
            if (a.getLong(0) != id) {
                throw new TransportException(ErrorCode.MALFORMED, "write to " + peer + ": shared-memory grant reply "
                        + a.getLong(0) + " while request " + id + " was in flight");
            }
            int status = a.getInt(8);
            String text = ShmOwner.text(a, ShmOwner.PATH_AT);
            Target t;
            if (status == ShmOwner.OK) {
                t = open(ps, a, text, emulated(d));
            } else if (status == ShmOwner.NOT_SHARED) {
                t = new Target(null, 0, 0, null, -1, 0, emulated(d));
            } else if (status >= ShmOwner.REFUSED && status - ShmOwner.REFUSED < ErrorCode.values().length) {
                throw new TransportException(ErrorCode.values()[status - ShmOwner.REFUSED], "write to " + peer
                        + " refused: " + text);
            } else {
                throw new TransportException(ErrorCode.MALFORMED, "write to " + peer + ": shared-memory grant reply "
                        + "with status " + status);
            }
            return remember(ps, d, t);
        } finally {
            ps.lock.unlock();
        }
    }

    /** Keeps a region's target for the next entries and batches (bounded: grants live as long as a request). */
    private static Target remember(PeerState ps, RegionDescriptor d, Target t) {
        if (ps.byRegion.size() >= MAX_REMEMBERED) {
            ps.byRegion.clear();
        }
        ps.byRegion.put(d.regionId(), t);
        return t;
    }

    /** Maps the file and the fence the owner named, or says the region is not reachable from this host. */
    private Target open(PeerState ps, ByteBuffer a, String file, RegionDescriptor emulated) {
        int slot = a.getInt(12);
        int generation = a.getInt(16);
        long fileOffset = a.getLong(24);
        long length = a.getLong(32);
        byte[] token = new byte[ShmFence.TOKEN_BYTES];
        a.get(40, token);
        String fencePath = ShmOwner.text(a, ShmOwner.FENCE_PATH_AT);
        Target none = new Target(null, 0, 0, null, -1, 0, emulated);
        mappings.readLock().lock();
        try {
            if (closed) {
                return none;
            }
            ShmFence fence = fences.get(fencePath);
            if (fence == null) {
                fence = ShmFence.open(fencePath, token);
                if (fence == null) {
                    return none; // another host's file, or none here
                }
                ShmFence raced = fences.putIfAbsent(fencePath, fence);
                if (raced != null) {
                    fence.close();
                    fence = raced;
                }
            }
            if (!Arrays.equals(fence.token, token)) {
                return none;
            }
            Mapped m = files.computeIfAbsent(file, ShmWriter::map);
            if (m == null) {
                return none;
            }
            if (fileOffset < 0 || length < 0 || fileOffset > m.view().capacity()
                    || length > m.view().capacity() - fileOffset) {
                return none;
            }
            int fileId = a.getInt(ShmOwner.FILE_ID_AT);
            if (fileId != 0) {
                ps.fileById.put(fileId, m); // later grants in this file whose key names this writer need no exchange
            }
            ps.fence = fence;
            return new Target(m, fileOffset, length, fence, slot, generation, emulated);
        } catch (RuntimeException e) {
            return none;
        } finally {
            mappings.readLock().unlock();
        }
    }

    private static Mapped map(String file) {
        File f = new File(file);
        if (!f.isFile() || f.length() > Integer.MAX_VALUE) {
            return null;
        }
        MappedByteBuffer b = IoUtil.mapExistingFile(f, FileChannel.MapMode.READ_WRITE, "pool", 0, f.length());
        UnsafeBuffer view = new UnsafeBuffer(b);
        // Fault every page into this mapping now, once, instead of inside each request's copy (a fresh mapping's
        // first write to a page costs a page fault, which made the first copies of each block several times slower
        // than memcpy). An atomic add of 0 writes nothing the owner could lose.
        for (int at = 0; at + 4 <= view.capacity(); at += POPULATE_STRIDE) {
            view.getAndAddInt(at, 0);
        }
        return new Mapped(file, b, view);
    }

    /**
     * Unmaps the pool and fence files whose owner deleted them (it closed its pool, or a process that swept after
     * it was killed did): a mapping would otherwise keep the deleted file's memory alive until this manager closes.
     * Runs once per grant hand-out; waits for the pieces being copied (at most one each).
     */
    private void dropVanished() {
        boolean any = false;
        for (String f : files.keySet()) {
            any |= !new File(f).exists();
        }
        for (String f : fences.keySet()) {
            any |= !new File(f).exists();
        }
        if (!any) {
            return;
        }
        mappings.writeLock().lock();
        try {
            files.values().removeIf(m -> {
                if (new File(m.path).exists()) {
                    return false;
                }
                m.gone = true;
                IoUtil.unmap(m.buffer());
                return true;
            });
            fences.values().removeIf(f -> {
                if (java.nio.file.Files.exists(f.path)) {
                    return false;
                }
                f.close();
                return true;
            });
            // Targets that name an unmapped file or fence are refused by their next piece and forgotten then.
            for (PeerState p : peers.values()) {
                p.byRegion.values().removeIf(t -> t.shared() && (t.file().gone || !fences.containsValue(t.fence())));
                p.fileById.values().removeIf(m -> m.gone);
                ShmFence f = p.fence;
                if (f != null && !fences.containsValue(f)) {
                    p.fence = null;
                }
            }
        } finally {
            mappings.writeLock().unlock();
        }
    }

    /** @return pool files mapped here now */
    int mappedFiles() {
        return files.size();
    }

    private static long left(long deadline, String peer) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            throw new TransportException(ErrorCode.TIMEOUT, "write to " + peer + ": deadline passed");
        }
        return left;
    }

    private static Duration remaining(long deadline, String peer) {
        return Duration.ofNanos(left(deadline, peer));
    }

    /** Waits for copies in progress, then unmaps every file. Idempotent. */
    @Override
    public void close() {
        closed = true;
        mappings.writeLock().lock();
        try {
            for (Mapped m : files.values()) {
                IoUtil.unmap(m.buffer());
            }
            files.clear();
            for (ShmFence f : fences.values()) {
                f.close();
            }
            fences.clear();
            // The per-peer control buffers are left to the GC: an exchange may still hold one.
            peers.clear();
        } finally {
            mappings.writeLock().unlock();
        }
    }
}
