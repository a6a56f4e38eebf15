package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.SendCompletion;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One-sided writes for a two-sided transport, with the semantics and errors of {@link Connection#write} and
 * {@link ConnectionManager#register}: the owner's agent receives each entry's bytes straight into the registered
 * memory (no staging), after checking every entry of the batch against its registration. A backend without
 * native RMA creates one per manager, delegates {@code register} and {@code write} to it, and closes it first
 * in its own {@code close()}.
 *
 * <p>Protocol per batch, on the writer's connection (control tags {@link Tags#RMA_REQUEST_TAG} ..
 * {@link Tags#RMA_DATA_TAG}): the writer sends a {@value #HEADER_BYTES}-byte header (magic, entry count, batch
 * id, total bytes, flags) and the entries ({@value #ENTRY_BYTES} bytes each: region id, 16-byte key, offset, length, the region's
 * address as the descriptor claims it);
 * the owner answers go or a refusal naming the entry ({@value #REPLY_BYTES}-byte reply with a reason); on go the
 * writer sends one data message per entry, which the owner receives into place, and the owner answers done. Where
 * both ends' connections are {@link VectoredMessages} (the writer says so in the header's flags, the owner in its go
 * reply), the batch's data is one message gathered from the sources and scattered into the targets instead. So a
 * batch costs two round trips plus its bytes; {@code write} returns after "done", which is remote completion.
 * Batches above {@value #MAX_ENTRIES} entries are split by the writer. One batch per (writer, owner) pair at a
 * time; batches of different writers are served concurrently (at most {@value #MAX_WORKERS} at once; a
 * stalled writer holds one worker for at most the operation timeout).
 *
 * <p>Registrations, keys and the check of every entry are a {@link RegionRegistry}'s: keys are 16 random bytes
 * from {@code SecureRandom}, compared in constant time. Region ids only grow, so a
 * known-but-deregistered id ({@code CANCELLED}) is told apart from one never issued ({@code UNAUTHORIZED}).
 * {@link RegisteredRegion#close()} refuses new batches at once and returns when no batch writes into the
 * region; since every receive into a region has the operation timeout as its deadline, it never waits longer
 * than that (plus a second), and after it returns nothing is written into the memory.
 */
public final class EmulatedOneSided implements AutoCloseable {
    /** Header bytes. */
    public static final int HEADER_BYTES = 32;
    /** Bytes per entry descriptor. */
    public static final int ENTRY_BYTES = 48;
    /** Reply bytes: batch id, status, entry index, reason. */
    public static final int REPLY_BYTES = 16 + 240;
    /** Largest entry count of one wire batch. */
    public static final int MAX_ENTRIES = 4096;
    /** Most batches served at once. */
    public static final int MAX_WORKERS = 8;
    /** Key length. */
    public static final int KEY_BYTES = RegionRegistry.KEY_BYTES;

    private static final int MAGIC = 0x31414d52; // "RMA1"
    private static final int GO = 0;
    private static final int DONE = 1;
    private static final int REFUSED = 2;
    /** Header flag: the writer can send the batch's data as one vectored message ({@link VectoredMessages}). */
    private static final long FLAG_VECTORED = 1;
    /** The go reply's entry field when the owner posted one vectored receive for the whole batch. */
    private static final int GO_VECTORED = 1;

    private final ConnectionManager manager;
    private final BufferManager buffers;
    private final ErrorHandler errors;
    private final Duration opTimeout;
    private final String name;
    private final AtomicLong nextBatchId = new AtomicLong(1);
    private final RegionRegistry regions = new RegionRegistry();
    private final Map<String, ReentrantLock> writerLocks = new ConcurrentHashMap<>();
    private final AtomicInteger refused = new AtomicInteger();
    private final AtomicLong vectored = new AtomicLong();
    private final Object lifecycle = new Object();
    private Thread poller;
    private ThreadPoolExecutor workers;
    private volatile boolean closed;

    /**
     * Creates the emulation over a manager; starts nothing until the first {@link #register}.
     *
     * @param manager   the two-sided transport endpoint
     * @param buffers   allocates the small control buffers (host memory)
     * @param errors    where refused or failed batches are reported
     * @param opTimeout deadline of each owner-side receive of a batch
     * @param name      for thread names and errors
     */
    public EmulatedOneSided(ConnectionManager manager, BufferManager buffers, ErrorHandler errors, Duration opTimeout,
                            String name) {
        this.manager = Objects.requireNonNull(manager, "manager");
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.errors = Objects.requireNonNull(errors, "errors");
        this.opTimeout = Objects.requireNonNull(opTimeout, "opTimeout");
        this.name = Objects.requireNonNull(name, "name");
    }

    /** @return batches this owner refused so far */
    public int refusedBatches() {
        return refused.get();
    }

    /** @return batches this owner received as one vectored data message ({@link VectoredMessages}) so far */
    public long vectoredBatches() {
        return vectored.get();
    }

    /** @return regions currently registered */
    public int registeredRegions() {
        return regions.size();
    }

    /**
     * Registers memory for writes by peers.
     *
     * @param memory host memory
     * @return the registration
     */
    public RegisteredRegion register(MemoryBuffer memory) {
        return register(memory, null);
    }

    /**
     * Registers memory for writes by the named peers only: a batch arriving on a connection to any other peer is
     * refused {@code UNAUTHORIZED}, genuine descriptor or not.
     *
     * @param memory  host memory
     * @param writers the peers allowed to write ({@link Connection#peer()} as this manager sees them), or null for
     *                any holder of the descriptor
     * @return the registration
     */
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        Objects.requireNonNull(memory, "memory");
        if (memory.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("emulated one-sided writes need host memory, not " + memory);
        }
        if (closed || !manager.isRunning()) {
            throw new TransportClosedException("register at " + manager.localAddress() + ": closed");
        }
        startAgent();
        Region r = new Region(regions.issue(manager.localAddress(), memory, writers));
        regions.publish(r.registration, r);
        return r;
    }

    private void startAgent() {
        synchronized (lifecycle) {
            if (poller != null || closed) {
                return;
            }
            AtomicInteger n = new AtomicInteger();
            workers = new ThreadPoolExecutor(0, MAX_WORKERS, 10, TimeUnit.SECONDS, new SynchronousQueue<>(), r -> {
                Thread t = new Thread(r, name + "-rma-" + n.getAndIncrement());
                t.setDaemon(true);
                return t;
            }, new ThreadPoolExecutor.CallerRunsPolicy());
            poller = new Thread(this::pollLoop, name + "-rma-poll");
            poller.setDaemon(true);
            poller.start();
        }
    }

    // ------------------------------------------------------------------ writer side

    /**
     * Writes a batch through {@code connection}; see {@link Connection#write}.
     *
     * @param connection the connection to the owner
     * @param batch      the entries
     * @param timeout    deadline of the whole call
     */
    public void write(Connection connection, WriteBatch batch, Duration timeout) {
        Objects.requireNonNull(connection, "connection");
        Objects.requireNonNull(batch, "batch");
        Objects.requireNonNull(timeout, "timeout");
        long deadline = System.nanoTime() + nanos(timeout);
        String peer = connection.peer();
        for (int i = 0; i < batch.size(); i++) {
            RegionDescriptor d = batch.target(i);
            if (!d.owner().equals(peer)) {
                throw new IllegalArgumentException("entry " + i + " targets region #" + d.regionId() + " of "
                        + d.owner() + " but the connection goes to " + peer);
            }
            if (d.key().length != KEY_BYTES) {
                throw new TransportException(ErrorCode.UNAUTHORIZED, "entry " + i + ": region #" + d.regionId()
                        + " has a " + d.key().length + "-byte key; this transport's keys have " + KEY_BYTES);
            }
            if (batch.source(i).kind() == MemoryKind.DEVICE) {
                throw new UnsupportedOperationException("emulated one-sided writes send host memory, not "
                        + batch.source(i));
            }
        }
        if (batch.size() == 0) {
            return;
        }
        ReentrantLock lock = writerLocks.computeIfAbsent(peer, k -> new ReentrantLock());
        try {
            if (!lock.tryLock(left(deadline, peer), TimeUnit.NANOSECONDS)) {
                throw new TransportException(ErrorCode.TIMEOUT, "write to " + peer + ": another batch to the same"
                        + " peer did not finish within " + timeout.toMillis() + " ms");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "write to " + peer + ": interrupted");
        }
        try (ControlBuffer ctl = new ControlBuffer(HEADER_BYTES + (long) ENTRY_BYTES * Math.min(batch.size(),
                MAX_ENTRIES) + REPLY_BYTES)) {
            for (int first = 0; first < batch.size(); first += MAX_ENTRIES) {
                writeWireBatch(connection, batch, first, Math.min(MAX_ENTRIES, batch.size() - first), deadline, ctl);
            }
        } finally {
            lock.unlock();
        }
    }

    private void writeWireBatch(Connection c, WriteBatch batch, int first, int n, long deadline, ControlBuffer ctl) {
        long batchId = nextBatchId.getAndIncrement();
        ByteBuffer b = ctl.bytes;
        long total = 0;
        int entriesAt = HEADER_BYTES;
        for (int i = 0; i < n; i++) {
            int e = first + i;
            RegionDescriptor d = batch.target(e);
            int at = entriesAt + i * ENTRY_BYTES;
            b.putLong(at, d.regionId());
            b.put(at + 8, d.key(), 0, KEY_BYTES);
            b.putLong(at + 24, batch.targetOffset(e));
            b.putLong(at + 32, batch.length(e));
            b.putLong(at + 40, d.address());
            total += batch.length(e);
        }
        b.putInt(0, MAGIC);
        b.putInt(4, n);
        b.putLong(8, batchId);
        b.putLong(16, total);
        b.putLong(24, c instanceof VectoredMessages ? FLAG_VECTORED : 0);
        String peer = c.peer();
        c.send(Tags.RMA_REQUEST_TAG, ctl.memory, 0, HEADER_BYTES, remaining(deadline, peer));
        c.send(Tags.RMA_ENTRIES_TAG, ctl.memory, entriesAt, (long) n * ENTRY_BYTES, remaining(deadline, peer));
        int replyAt = entriesAt + n * ENTRY_BYTES;
        if (awaitReply(c, ctl, replyAt, batchId, GO, first, deadline) == GO_VECTORED) {
            sendVectored(c, batch, first, n, deadline);
        } else {
            sendAll(c, batch, first, n, deadline);
        }
        awaitReply(c, ctl, replyAt, batchId, DONE, first, deadline);
    }

    /**
     * Sends a wire batch's data messages: posted all at once where the transport posts sends
     * ({@link Connection#sendAsync}), so the owner's transport takes one entry after another without a wake-up of
     * this thread between them; from the first send it does not post, one after another. Returns once every send
     * ended (the sources are the caller's again), throwing the first failure.
     */
    private static void sendAll(Connection c, WriteBatch batch, int first, int n, long deadline) {
        String peer = c.peer();
        Landing landing = new Landing();
        RuntimeException failed = null;
        try {
            Duration timeout = remaining(deadline, peer);
            while (landing.posted < n) {
                int e = first + landing.posted;
                if (!c.sendAsync(Tags.RMA_DATA_TAG, batch.source(e), batch.sourceOffset(e), batch.length(e),
                        timeout, landing)) {
                    break;
                }
                landing.posted++;
            }
            for (int i = landing.posted; i < n; i++) {
                int e = first + i;
                c.send(Tags.RMA_DATA_TAG, batch.source(e), batch.sourceOffset(e), batch.length(e),
                        remaining(deadline, peer));
            }
        } catch (RuntimeException e) {
            failed = e;
        }
        awaitSends(landing, peer, deadline, failed);
    }

    /**
     * Sends a wire batch's data as one message gathered from its entries' sources, as the owner's go reply asked
     * (it posted one receive scattering the message into the entries' targets). Returns once the send ended.
     */
    private static void sendVectored(Connection c, WriteBatch batch, int first, int n, long deadline) {
        String peer = c.peer();
        MemoryBuffer[] sources = new MemoryBuffer[n];
        long[] offsets = new long[n];
        long[] lengths = new long[n];
        for (int i = 0; i < n; i++) {
            sources[i] = batch.source(first + i);
            offsets[i] = batch.sourceOffset(first + i);
            lengths[i] = batch.length(first + i);
        }
        Landing landing = new Landing();
        RuntimeException failed = null;
        try {
            if (!(c instanceof VectoredMessages v) || !v.sendvAsync(Tags.RMA_DATA_TAG, sources, offsets, lengths, 0,
                    n, remaining(deadline, peer), landing)) {
                throw new TransportException(ErrorCode.INTERNAL, "write to " + peer + ": the owner took the batch as "
                        + "one vectored message, which this connection did not send");
            }
            landing.posted = 1;
        } catch (RuntimeException e) {
            failed = e;
        }
        awaitSends(landing, peer, deadline, failed);
    }

    /** Waits for a batch's posted sends (a second past the deadline at most) and throws the first failure. */
    private static void awaitSends(Landing landing, String peer, long deadline, RuntimeException failed) {
        if (!landing.awaitAll(deadline + TimeUnit.SECONDS.toNanos(1))) {
            throw new TransportException(ErrorCode.TIMEOUT, "write to " + peer + ": " + landing.pending() + " of "
                    + landing.posted + " posted sends did not end by their deadline", failed);
        }
        if (failed != null) {
            throw failed;
        }
        landing.check();
    }

    /** @return the reply's entry field (for go: {@link #GO_VECTORED} or 0) */
    private int awaitReply(Connection c, ControlBuffer ctl, int at, long batchId, int expected, int first,
                           long deadline) {
        c.recv(Tags.RMA_REPLY_TAG, ctl.memory, at, REPLY_BYTES, remaining(deadline, c.peer()));
        ByteBuffer b = ctl.bytes;
        long id = b.getLong(at);
        int status = b.getInt(at + 8);
        int entry = b.getInt(at + 12);
        if (id != batchId) {
            throw new TransportException(ErrorCode.MALFORMED, "write to " + c.peer() + ": reply for batch " + id
                    + " while batch " + batchId + " was in flight");
        }
        if (status == expected) {
            return entry;
        }
        if (status >= REFUSED && status - REFUSED < ErrorCode.values().length) {
            ErrorCode code = ErrorCode.values()[status - REFUSED];
            throw new TransportException(code, "write to " + c.peer() + " refused at entry " + (first + entry)
                    + ": " + reason(b, at + 16));
        }
        throw new TransportException(ErrorCode.MALFORMED, "write to " + c.peer() + ": unexpected reply status "
                + status);
    }

    private static String reason(ByteBuffer b, int at) {
        int len = Math.min(b.getShort(at) & 0xffff, REPLY_BYTES - 18);
        byte[] s = new byte[len];
        b.get(at + 2, s);
        return new String(s, StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------------ owner side

    private void pollLoop() {
        try (ControlBuffer hdr = new ControlBuffer(HEADER_BYTES)) {
            while (!closed) {
                Connection c;
                try {
                    c = manager.pollConnect(Tags.RMA_REQUEST_TAG, hdr.memory, 0, HEADER_BYTES,
                            Duration.ofMillis(100));
                } catch (TransportClosedException e) {
                    return;
                } catch (RuntimeException e) {
                    errors.onError(new TransportException(ErrorCode.MALFORMED, name + ": bad one-sided write "
                            + "request: " + e.getMessage(), e));
                    continue;
                }
                if (c == null) {
                    continue;
                }
                ByteBuffer b = hdr.bytes;
                int magic = b.getInt(0);
                int n = b.getInt(4);
                long batchId = b.getLong(8);
                long flags = b.getLong(24);
                if (magic != MAGIC || n < 1 || n > MAX_ENTRIES) {
                    // Not our protocol: nothing more of this batch is read (its entries would be unsized).
                    refused.incrementAndGet();
                    errors.onError(new TransportException(ErrorCode.MALFORMED, name + ": one-sided write request"
                            + " from " + c.peer() + " with magic " + Integer.toHexString(magic) + " and " + n
                            + " entries (at most " + MAX_ENTRIES + "); dropped"));
                    continue;
                }
                Connection conn = c;
                try {
                    workers.execute(() -> serve(conn, batchId, n, flags));
                } catch (RuntimeException e) {
                    errors.onError(e);
                }
            }
        } catch (RuntimeException e) {
            errors.onError(new TransportException(ErrorCode.INTERNAL, name + ": one-sided write agent stopped: " + e,
                    e));
        }
    }

    private void serve(Connection c, long batchId, int n, long flags) {
        long deadline = System.nanoTime() + nanos(opTimeout);
        RegionRegistry.Registration[] targets = new RegionRegistry.Registration[n];
        int acquired = 0;
        try (ControlBuffer ctl = new ControlBuffer((long) n * ENTRY_BYTES + REPLY_BYTES)) {
            ByteBuffer b = ctl.bytes;
            int replyAt = n * ENTRY_BYTES;
            c.recv(Tags.RMA_ENTRIES_TAG, ctl.memory, 0, (long) n * ENTRY_BYTES, remaining(deadline, c.peer()));
            byte[] key = new byte[KEY_BYTES];
            for (int i = 0; i < n; i++) {
                int at = i * ENTRY_BYTES;
                long id = b.getLong(at);
                b.get(at + 8, key);
                long off = b.getLong(at + 24);
                long len = b.getLong(at + 32);
                long claimedAddress = b.getLong(at + 40);
                try {
                    targets[acquired] = regions.acquire(id, key, c.peer(), claimedAddress, off, len);
                } catch (RegionRegistry.Refusal refusal) {
                    ErrorCode code = refusal.code();
                    refused.incrementAndGet();
                    reply(c, ctl, replyAt, batchId, REFUSED + code.ordinal(), i, refusal.reason(), deadline);
                    errors.onError(new TransportException(code, name + ": refused one-sided write from " + c.peer()
                            + ", entry " + i + ": " + refusal.reason()));
                    return;
                }
                acquired++;
            }
            Landing landing = new Landing();
            RuntimeException failed = null;
            try {
                boolean one = (flags & FLAG_VECTORED) != 0 && c instanceof VectoredMessages v
                        && postVectored(v, targets, b, n, deadline, landing, c.peer());
                if (one) {
                    vectored.incrementAndGet();
                } else {
                    post(c, targets, b, n, deadline, landing);
                }
                reply(c, ctl, replyAt, batchId, GO, one ? GO_VECTORED : 0, "", deadline);
                for (int i = one ? n : landing.posted; i < n; i++) {
                    int at = i * ENTRY_BYTES;
                    c.recv(Tags.RMA_DATA_TAG, targets[i].memory(), b.getLong(at + 24), b.getLong(at + 32),
                            remaining(deadline, c.peer()));
                }
            } catch (RuntimeException e) {
                failed = e;
            }
            // Whatever happened, no posted receive may still write when the regions are released.
            if (!landing.awaitAll(deadline + TimeUnit.SECONDS.toNanos(1))) {
                acquired = 0; // kept: the regions' revocation then reports the batch still writing
                throw new TransportException(ErrorCode.INTERNAL, "batch " + batchId + ": " + landing.pending()
                        + " of " + landing.posted + " posted receives did not end by their deadline", failed);
            }
            if (failed != null) {
                throw failed;
            }
            landing.check();
            release(targets, acquired);
            acquired = 0;
            reply(c, ctl, replyAt, batchId, DONE, 0, "", deadline);
        } catch (TransportClosedException e) {
            // closing
        } catch (RuntimeException e) {
            errors.onError(new TransportException(e instanceof TransportException t ? t.code() : ErrorCode.NETWORK,
                    name + ": one-sided write from " + c.peer() + " failed: " + e.getMessage(), e));
        } finally {
            release(targets, acquired);
        }
    }

    /**
     * Posts the batch's data receives, in entry order, where the transport posts receives
     * ({@link Connection#recvAsync}): each entry's receive is then waiting before its message arrives, and the
     * transport places the entries one after another without a hand-off to this worker between them. Stops at the
     * first receive the transport does not post; the caller receives the rest itself (posted and blocking
     * receives of one tag take its messages in the order they were posted). {@link Landing#posted} counts the
     * receives posted, also when posting throws.
     */
    private static void post(Connection c, RegionRegistry.Registration[] targets, ByteBuffer b, int n, long deadline,
                             Landing landing) {
        Duration timeout = remaining(deadline, c.peer());
        while (landing.posted < n) {
            int at = landing.posted * ENTRY_BYTES;
            if (!c.recvAsync(Tags.RMA_DATA_TAG, targets[landing.posted].memory(), b.getLong(at + 24),
                    b.getLong(at + 32), timeout, landing)) {
                return;
            }
            landing.posted++;
        }
    }

    /**
     * Posts one receive that scatters the batch's single data message into every entry's target, where the
     * connection can ({@link VectoredMessages}); {@link Landing#posted} is then 1.
     *
     * @return false when it did not post (nothing posted: the caller posts per entry)
     */
    private static boolean postVectored(VectoredMessages v, RegionRegistry.Registration[] targets, ByteBuffer b, int n,
                                        long deadline, Landing landing, String peer) {
        MemoryBuffer[] memory = new MemoryBuffer[n];
        long[] offsets = new long[n];
        long[] lengths = new long[n];
        for (int i = 0; i < n; i++) {
            memory[i] = targets[i].memory();
            offsets[i] = b.getLong(i * ENTRY_BYTES + 24);
            lengths[i] = b.getLong(i * ENTRY_BYTES + 32);
        }
        if (!v.recvvAsync(Tags.RMA_DATA_TAG, memory, offsets, lengths, 0, n, remaining(deadline, peer), landing)) {
            return false;
        }
        landing.posted = 1;
        return true;
    }

    /** The posted data sends or receives of one batch: counts them down and keeps the first failure. */
    private static final class Landing implements RecvCompletion, SendCompletion {
        private final AtomicInteger ended = new AtomicInteger();
        private final Thread waiter = Thread.currentThread();
        private volatile TransportException failure;
        /** Sends or receives posted so far (the posting thread only). */
        int posted;

        @Override
        public void sent(TransportException f) {
            completed(f);
        }

        @Override
        public void completed(TransportException f) {
            if (f != null && failure == null) {
                failure = f;
            }
            ended.incrementAndGet();
            LockSupport.unpark(waiter);
        }

        /**
         * Waits until every posted operation ended (each has the batch's deadline), at most until {@code until}.
         *
         * @return false when some had not ended by then
         */
        boolean awaitAll(long until) {
            while (ended.get() < posted) {
                long left = until - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                LockSupport.parkNanos(this, left);
            }
            return true;
        }

        int pending() {
            return posted - ended.get();
        }

        /** Throws the first failure of a posted operation. */
        void check() {
            TransportException f = failure;
            if (f != null) {
                throw f;
            }
        }
    }

    private static void release(RegionRegistry.Registration[] targets, int n) {
        for (int i = 0; i < n; i++) {
            targets[i].release();
        }
    }

    private void reply(Connection c, ControlBuffer ctl, int at, long batchId, int status, int entry, String why,
                       long deadline) {
        ByteBuffer b = ctl.bytes;
        b.putLong(at, batchId);
        b.putInt(at + 8, status);
        b.putInt(at + 12, entry);
        byte[] s = why.getBytes(StandardCharsets.UTF_8);
        int len = Math.min(s.length, REPLY_BYTES - 18);
        b.putShort(at + 16, (short) len);
        b.put(at + 18, s, 0, len);
        c.send(Tags.RMA_REPLY_TAG, ctl.memory, at, REPLY_BYTES, remaining(deadline, c.peer()));
    }

    // ------------------------------------------------------------------ lifecycle

    /** Revokes every region and stops the agent (bounded). Idempotent. */
    @Override
    public void close() {
        Thread p;
        ThreadPoolExecutor w;
        synchronized (lifecycle) {
            if (closed) {
                return;
            }
            closed = true;
            p = poller;
            w = workers;
        }
        for (RegionRegistry.Registration r : regions.registrations()) {
            r.handle().close();
        }
        if (w != null) {
            w.shutdown();
        }
        try {
            if (p != null) {
                p.join(nanos(opTimeout) / 1_000_000 + 1_000);
            }
            if (w != null) {
                w.awaitTermination(nanos(opTimeout) + TimeUnit.SECONDS.toNanos(1), TimeUnit.NANOSECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static long nanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE / 4;
        }
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

    /** A small off-heap control buffer from the buffer manager, freed on close. */
    private final class ControlBuffer implements AutoCloseable {
        final MemoryBuffer memory;
        final ByteBuffer bytes;

        ControlBuffer(long size) {
            this.memory = buffers.allocate(size, MemoryKind.HOST);
            this.bytes = memory.asByteBuffer();
        }

        @Override
        public void close() {
            memory.close();
        }
    }

    /** One registration, as {@link #register} hands it out. */
    private final class Region implements RegisteredRegion {
        final RegionRegistry.Registration registration;

        Region(RegionRegistry.Registration registration) {
            this.registration = registration;
        }

        @Override
        public RegionDescriptor descriptor() {
            return registration.descriptor();
        }

        @Override
        public MemoryBuffer memory() {
            return registration.memory();
        }

        @Override
        public void close() {
            long deadline = System.nanoTime() + nanos(opTimeout) + TimeUnit.SECONDS.toNanos(1);
            int left = registration.revoke(deadline, false);
            if (left > 0) {
                errors.onError(new TransportException(ErrorCode.INTERNAL, name + ": region #" + registration.id()
                        + " still has " + left + " batches writing after " + opTimeout.toMillis() + " ms"));
            }
        }

        @Override
        public String toString() {
            return "EmulatedRegion{" + registration.descriptor() + "}";
        }
    }
}
