package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.transport.support.RegionRegistry;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Native one-sided writes of one manager: MPI-3 RMA on the process's dynamic window ({@code MPI_Win_attach} at
 * register, {@code MPI_Put} + {@code MPI_Win_flush} by the writer: Open MPI's {@code osc rdma} over vader puts with
 * a single CMA copy by the writer, the owner's CPU takes no part in placing the bytes), guarded by an owner-side
 * grant that the owner's progress agent gives or refuses.
 *
 * <p>Why a grant: with a pure passive-target protocol a writer could check descriptors only against a table in the
 * owner's memory with MPI atomics, and here those need the owner's progress ({@code MPI_Fetch_and_op} to a sleeping
 * target waited until it called MPI again, 3.9 s in the README's measurement) inside an {@code MPI_Win_flush} that
 * has no deadline and cannot be cancelled. The grant is two small inline messages per batch that the owner's agent
 * answers without blocking, so every wait has a deadline and refusals are decided by the owner, who alone knows
 * what is registered.
 *
 * <p>Per batch (at most {@link #maxEntries()} entries per wire request; larger batches are split): the writer sends
 * a request (header {@value #HEADER_BYTES} bytes, {@value #ENTRY_BYTES} bytes per entry: region id, 16-byte key,
 * offset, length, the region's address as the descriptor claims it) on {@link Tags#RMA_REQUEST_TAG}; the owner's
 * agent checks every entry against its registrations and answers on {@link Tags#RMA_REPLY_TAG} go (the regions'
 * in-flight counts are raised) or a refusal naming the entry: outside the region {@code MALFORMED}, unknown region /
 * wrong key / wrong address or length {@code UNAUTHORIZED}, deregistered {@code CANCELLED}. On go the writer puts
 * every entry at {@code address + offset} of the owner's process, flushes (remote completion), and sends done,
 * which lowers the counts. {@link RegisteredRegion#close()} refuses new grants at once, waits (default timeout)
 * until no granted batch writes into the region, then detaches it: after it returns no write can land. A request
 * that reaches a closed endpoint is refused {@code CANCELLED} by the process's agent.
 */
final class MpiOneSided {
    static final int HEADER_BYTES = 32;
    static final int ENTRY_BYTES = 48;
    static final int REPLY_BYTES = 256;
    static final int KEY_BYTES = RegionRegistry.KEY_BYTES;
    static final int MAGIC = 0x314e4d52; // "RMN1"
    static final int REQUEST = 1;
    static final int DONE = 2;
    static final int GO = 0;
    static final int REFUSED = 2;

    private final MpiConnectionManager manager;
    private final MpiRuntime runtime;
    private final AtomicLong nextBatchId = new AtomicLong(1);
    /** Ids, keys and the check of every entry: the same registry as the emulated writes'. */
    private final RegionRegistry regions = new RegionRegistry();
    private final Map<String, ReentrantLock> writerLocks = new ConcurrentHashMap<>();
    /** Grants given and not yet done: owned by the agent thread. */
    private final Map<GrantKey, RegionRegistry.Registration[]> grants = new HashMap<>();
    /** The agent's reply buffer. */
    private final HostBuffer reply = HostBuffer.allocate(REPLY_BYTES);
    private final ByteBuffer replyView = reply.asByteBuffer();
    private volatile boolean closed;

    private record GrantKey(int link, int rank, int endpoint, long batch) {
    }

    MpiOneSided(MpiConnectionManager manager, MpiRuntime runtime) {
        this.manager = manager;
        this.runtime = runtime;
    }

    /** @return entries per wire request: the request travels inline in one envelope */
    int maxEntries() {
        return (manager.settings().eagerBytes() - HEADER_BYTES) / ENTRY_BYTES;
    }

    /** @return regions registered now */
    int registeredRegions() {
        return regions.size();
    }

    // ------------------------------------------------------------------ owner side: registration

    RegisteredRegion register(MemoryBuffer memory) {
        Objects.requireNonNull(memory, "memory");
        if (memory.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the mpi transport registers host memory only, not " + memory);
        }
        if (closed) {
            throw new TransportClosedException("register at " + manager.localAddress() + ": closed");
        }
        RegionRegistry.Registration registration = regions.issue(manager.localAddress(), memory, null);
        if (!runtime.enter()) {
            throw new TransportClosedException("register at " + manager.localAddress() + ": MPI is finalizing");
        }
        try {
            MpiNative.rmaAttach(memory.address(), memory.size());
        } catch (MpiNative.MpiCallException e) {
            throw new TransportException(ErrorCode.NETWORK, "register " + memory.size() + " bytes at "
                    + manager.localAddress() + ": " + e.getMessage() + " (Open MPI's osc rdma attaches at most"
                    + " osc_rdma_max_attach regions per process, 64 by default)", e);
        } finally {
            runtime.exit();
        }
        Region r = new Region(registration);
        regions.publish(registration, r);
        return r;
    }

    // ------------------------------------------------------------------ owner side: the agent's part

    /**
     * Serves one request or done message (called by the progress agent, never blocks: the reply is an inline
     * send).
     *
     * @param payload native address of the message, {@code length} bytes
     */
    void onMessage(int link, int rank, int endpoint, long payload, long length) {
        ByteBuffer m = MpiNative.wrap(payload, length).order(ByteOrder.LITTLE_ENDIAN);
        if (length < HEADER_BYTES || m.getInt(0) != MAGIC) {
            refusedQuietly(link, rank, endpoint, "one-sided message of " + length + " bytes without the header");
            return;
        }
        int type = m.getInt(4);
        long batch = m.getLong(8);
        GrantKey key = new GrantKey(link, rank, endpoint, batch);
        if (type == DONE) {
            RegionRegistry.Registration[] held = grants.remove(key);
            if (held != null) {
                for (RegionRegistry.Registration r : held) {
                    r.release();
                }
            }
            return;
        }
        int n = m.getInt(16);
        if (type != REQUEST || n < 1 || n > maxEntries() || length != HEADER_BYTES + (long) n * ENTRY_BYTES) {
            refusedQuietly(link, rank, endpoint, "one-sided request of type " + type + " with " + n + " entries in "
                    + length + " bytes");
            return;
        }
        RegionRegistry.Registration[] targets = new RegionRegistry.Registration[n];
        int acquired = 0;
        byte[] k = new byte[KEY_BYTES];
        for (int i = 0; i < n; i++) {
            int at = HEADER_BYTES + i * ENTRY_BYTES;
            long id = m.getLong(at);
            m.get(at + 8, k);
            long off = m.getLong(at + 24);
            long len = m.getLong(at + 32);
            long claimed = m.getLong(at + 40);
            try {
                // The writer is not told apart here: MPI regions are registered without writers.
                targets[acquired] = regions.acquire(id, k, null, claimed, off, len);
            } catch (RegionRegistry.Refusal refusal) {
                ErrorCode code = refusal.code();
                String why = refusal.reason();
                for (int j = 0; j < acquired; j++) {
                    targets[j].release();
                }
                runtime.counters().rmaRefused.increment();
                reply(link, rank, endpoint, batch, REFUSED + code.ordinal(), i, why);
                runtime.reportTo(manager.endpointId(), "rma-refused", new TransportException(code, manager
                        + ": refused a one-sided write from " + runtime.address(rank, endpoint) + ", entry " + i + ": "
                        + why));
                return;
            }
            acquired++;
        }
        grants.put(key, targets);
        reply(link, rank, endpoint, batch, GO, 0, "");
    }

    private void refusedQuietly(int link, int rank, int endpoint, String why) {
        runtime.counters().malformed.increment();
        runtime.reportTo(manager.endpointId(), "rma-malformed", new TransportException(ErrorCode.MALFORMED, manager
                + ": dropped a one-sided message from " + runtime.address(rank, endpoint) + ": " + why));
    }

    private void reply(int link, int rank, int endpoint, long batch, int status, int entry, String why) {
        writeReply(replyView, batch, status, entry, why);
        MpiDataPath.sendInline(runtime, runtime.links().get(link), rank, manager.endpointId(), endpoint,
                Tags.RMA_REPLY_TAG, reply.address(), REPLY_BYTES);
    }

    static void writeReply(ByteBuffer b, long batch, int status, int entry, String why) {
        b.putLong(0, batch);
        b.putInt(8, status);
        b.putInt(12, entry);
        byte[] s = why.getBytes(StandardCharsets.UTF_8);
        int len = Math.min(s.length, REPLY_BYTES - 18);
        b.putShort(16, (short) len);
        b.put(18, s, 0, len);
    }

    // ------------------------------------------------------------------ writer side

    void write(MpiConnection conn, WriteBatch batch, Duration timeout) {
        long deadline = System.nanoTime() + MpiConnectionManager.nanos(timeout);
        String peer = conn.peer();
        for (int i = 0; i < batch.size(); i++) {
            RegionDescriptor d = batch.target(i);
            if (!d.owner().equals(peer)) {
                throw new IllegalArgumentException("entry " + i + " targets region #" + d.regionId() + " of "
                        + MpiAddress.shorten(d.owner()) + " but the connection goes to " + peer);
            }
            if (d.key().length != KEY_BYTES) {
                throw new TransportException(ErrorCode.UNAUTHORIZED, "entry " + i + ": region #" + d.regionId()
                        + " has a " + d.key().length + "-byte key; this transport's keys have " + KEY_BYTES);
            }
            if (batch.source(i).kind() == MemoryKind.DEVICE) {
                throw new UnsupportedOperationException("the mpi transport writes host memory only, not "
                        + batch.source(i));
            }
        }
        if (batch.size() == 0) {
            return;
        }
        if (conn.link().index() != 0) {
            throw new TransportException(ErrorCode.NETWORK, "one-sided write to " + peer + ": the MPI window spans"
                    + " this MPI world only; " + peer + " is reached through a link to another world");
        }
        ReentrantLock lock = writerLocks.computeIfAbsent(peer, p -> new ReentrantLock());
        try {
            if (!lock.tryLock(left(deadline, peer), TimeUnit.NANOSECONDS)) {
                throw new TransportException(ErrorCode.TIMEOUT, "write to " + peer + ": another batch to the same"
                        + " peer did not finish within " + timeout.toMillis() + " ms");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "write to " + peer + ": interrupted");
        }
        int max = maxEntries();
        try (HostBuffer ctl = HostBuffer.allocate(HEADER_BYTES + (long) ENTRY_BYTES * Math.min(batch.size(), max)
                + REPLY_BYTES)) {
            for (int first = 0; first < batch.size(); first += max) {
                writeWire(conn, batch, first, Math.min(max, batch.size() - first), deadline, ctl);
            }
        } finally {
            lock.unlock();
        }
    }

    private void writeWire(MpiConnection conn, WriteBatch batch, int first, int n, long deadline, HostBuffer ctl) {
        long id = nextBatchId.getAndIncrement();
        ByteBuffer b = ctl.asByteBuffer();
        long total = 0;
        for (int i = 0; i < n; i++) {
            int e = first + i;
            RegionDescriptor d = batch.target(e);
            int at = HEADER_BYTES + i * ENTRY_BYTES;
            b.putLong(at, d.regionId());
            b.put(at + 8, d.key(), 0, KEY_BYTES);
            b.putLong(at + 24, batch.targetOffset(e));
            b.putLong(at + 32, batch.length(e));
            b.putLong(at + 40, d.address());
            total += batch.length(e);
        }
        header(b, REQUEST, id, n, total);
        int requestBytes = HEADER_BYTES + n * ENTRY_BYTES;
        String peer = conn.peer();
        conn.send(Tags.RMA_REQUEST_TAG, ctl, 0, requestBytes, remaining(deadline, peer));
        awaitGo(conn, ctl, requestBytes, id, first, deadline);
        // Granted: put every entry, flush (remote completion), then say done, whatever happened.
        try {
            if (!runtime.enter()) {
                throw new TransportClosedException("write to " + peer + ": MPI is finalizing");
            }
            try {
                for (int i = 0; i < n; i++) {
                    int e = first + i;
                    MpiNative.rmaPut(batch.source(e).address() + batch.sourceOffset(e), batch.length(e), conn.rank(),
                            batch.target(e).address() + batch.targetOffset(e));
                }
                MpiNative.rmaFlush(conn.rank());
            } catch (MpiNative.MpiCallException ex) {
                throw new TransportException(ErrorCode.NETWORK, "one-sided write of " + total + " bytes to " + peer
                        + " failed: " + ex.getMessage(), ex);
            } finally {
                runtime.exit();
            }
            runtime.counters().rmaWrites.increment();
        } finally {
            header(b, DONE, id, 0, 0);
            conn.send(Tags.RMA_REQUEST_TAG, ctl, 0, HEADER_BYTES, manager.defaultTimeout());
        }
    }

    private static void header(ByteBuffer b, int type, long batch, int n, long total) {
        b.putInt(0, MAGIC);
        b.putInt(4, type);
        b.putLong(8, batch);
        b.putInt(16, n);
        b.putInt(20, 0);
        b.putLong(24, total);
    }

    private void awaitGo(Connection c, HostBuffer ctl, int at, long batch, int first, long deadline) {
        ByteBuffer b = ctl.asByteBuffer();
        while (true) {
            c.recv(Tags.RMA_REPLY_TAG, ctl, at, REPLY_BYTES, remaining(deadline, c.peer()));
            long id = b.getLong(at);
            if (id < batch) {
                continue; // the late answer to a batch that timed out earlier
            }
            int status = b.getInt(at + 8);
            if (id == batch && status == GO) {
                return;
            }
            if (id == batch && status >= REFUSED && status - REFUSED < ErrorCode.values().length) {
                ErrorCode code = ErrorCode.values()[status - REFUSED];
                int len = Math.min(b.getShort(at + 16) & 0xffff, REPLY_BYTES - 18);
                byte[] s = new byte[len];
                b.get(at + 18, s);
                throw new TransportException(code, "write to " + c.peer() + " refused at entry "
                        + (first + b.getInt(at + 12)) + ": " + new String(s, StandardCharsets.UTF_8));
            }
            throw new TransportException(ErrorCode.MALFORMED, "write to " + c.peer() + ": reply " + status
                    + " for batch " + id + " while batch " + batch + " was in flight");
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

    // ------------------------------------------------------------------ lifecycle

    /** Revokes every region (each waits for its granted writes, bounded) and frees the reply buffer. */
    void close() {
        closed = true;
        for (RegionRegistry.Registration r : regions.registrations()) {
            r.handle().close();
        }
    }

    /** Called after the endpoint closed (the agent no longer calls {@link #onMessage}). */
    void release() {
        reply.close();
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
            long id = registration.id();
            MemoryBuffer memory = registration.memory();
            long deadline = System.nanoTime() + MpiConnectionManager.nanos(manager.defaultTimeout());
            int inFlight = registration.revoke(deadline, true);
            if (inFlight < 0) {
                return; // detached by an earlier close
            }
            if (inFlight > 0) {
                manager.backgroundError(new TransportException(ErrorCode.INTERNAL, manager + ": region #" + id
                        + " still has " + inFlight + " granted write(s) after " + manager.defaultTimeout()
                        .toMillis() + " ms; detached anyway (a stalled writer may still put into it)"));
            }
            if (runtime.enter()) {
                try {
                    MpiNative.rmaDetach(memory.address());
                } catch (MpiNative.MpiCallException e) {
                    manager.backgroundError(new TransportException(ErrorCode.NETWORK, manager + ": detaching region #"
                            + id + " failed: " + e.getMessage(), e));
                } finally {
                    runtime.exit();
                }
            }
        }

        @Override
        public String toString() {
            return "MpiRegion{" + registration.descriptor() + "}";
        }
    }
}
