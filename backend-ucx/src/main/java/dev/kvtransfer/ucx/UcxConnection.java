package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.SendCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.ucp.UcpEndpoint;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The connection to one peer manager, identified by the peer's listen address. One object per peer address
 * whichever side dialed: messages the peer sends reach it by the sender id ({@link #inId}) this manager gave
 * the peer, and it sends on one endpoint ({@link #sendEp}, created by the peer's worker address) with the id the
 * peer gave this manager ({@link #outId}), so order per (connection, tag) holds.
 *
 * <p>Fields are owned by one agent each, as marked; {@link #failure} is published to callers.
 */
final class UcxConnection implements Connection, dev.kvtransfer.transport.support.VectoredMessages {
    final UcxConnectionManager manager;
    final String peer;
    /** The id this manager gave the peer: bits 32..62 of every tag the peer sends here. */
    final int inId;

    /** Why this connection is dead; set once, on the progress agent. */
    volatile UcxFailure failure;
    /** Its endpoint exists (the handshake finished): small sends may be buffered. */
    volatile boolean established;

    // ---- progress agent only ----
    /** The id the peer gave this manager; 0 until the handshake finished. */
    int outId;
    /** The endpoint all sends go on (to the peer's worker address). */
    UcpEndpoint sendEp;
    /** Every endpoint to the peer, closed together. */
    final List<UcpEndpoint> endpoints = new ArrayList<>(1);
    /** Sends that arrived before the handshake finished, posted in order once it has. */
    final ArrayDeque<UcxOp> waitingSends = new ArrayDeque<>();
    /** Posted operations, to fail when the peer is lost. */
    final Set<UcxOp> pending = Collections.newSetFromMap(new IdentityHashMap<>());
    /** Abandoned sends to this peer being discarded, per tag (null until the first). */
    List<AbandonedSends.Outgoing> outgoing;
    /** The peer's abandoned sends this side is discarding (null until the first). */
    List<AbandonedSends.Incoming> incoming;

    // ---- bootstrap agent only ----
    /** Established control sessions (two when both sides dialed at once). */
    final List<BootstrapSession> sessions = new ArrayList<>(2);
    /** The peer's instance id, bound by the first session that completed; 0 until then. */
    long peerInstance;
    byte[] peerWorker;
    int peerSenderId;
    /** The bootstrap gave the connection up (its control connection died); the progress agent fails it. */
    boolean controlLost;
    /** Dials of this connection in progress. */
    int dialing;
    /** Control frames queued until a session is established (frame type, body; fail action). */
    final ArrayDeque<Object[]> controlBacklog = new ArrayDeque<>();

    // ---- one-sided writes: guarded by the map itself ----
    /** The peer's regions this writer validated, by region id. */
    final java.util.HashMap<Long, RmaWriter.Target> writerTargets = new java.util.HashMap<>();

    UcxConnection(UcxConnectionManager manager, String peer, int inId) {
        this.manager = manager;
        this.peer = peer;
        this.inId = inId;
    }

    /** @return whether sends can be posted now (progress agent) */
    boolean ready() {
        return sendEp != null && outId != 0 && failure == null;
    }

    @Override
    public Duration defaultTimeout() {
        return manager.defaultTimeout();
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.send(this, tag, buffer, offset, length, timeout);
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.recv(this, tag, buffer, offset, length, timeout);
    }

    /**
     * Posted: the progress agent posts it as a blocking send and calls {@code done} when UCX completes it; a send
     * past its deadline is abandoned as a blocking one is. A send small enough for the buffered path is sent here
     * and completes at once.
     */
    @Override
    public boolean sendAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                             SendCompletion done) {
        Objects.requireNonNull(done, "done");
        if (length <= manager.settings().bufferedSendBytes()) {
            try {
                send(tag, buffer, offset, length, timeout);
            } catch (TransportClosedException e) {
                throw e;
            } catch (TransportException e) {
                done.sent(e);
                return true;
            }
            done.sent(null);
            return true;
        }
        manager.postAsync(UcxOp.SEND, this, tag, buffer, offset, length, null, timeout, done::sent);
        return true;
    }

    /** Posted: the progress agent posts it as a blocking receive and calls {@code done} when UCX completes it. */
    @Override
    public boolean recvAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                             dev.kvtransfer.api.transport.RecvCompletion done) {
        manager.postAsync(UcxOp.RECV, this, tag, buffer, offset, length, null, timeout, done);
        return true;
    }

    /** Posted as one tagged message of UCX's IOV datatype (host memory only; else false, nothing sent). */
    @Override
    public boolean sendvAsync(int tag, MemoryBuffer[] buffers, long[] offsets, long[] lengths, int from, int count,
                              Duration timeout, SendCompletion done) {
        long[][] iov = iov(buffers, offsets, lengths, from, count);
        if (iov == null) {
            return false;
        }
        manager.postAsync(UcxOp.SEND, this, tag, buffers[from], offsets[from], lengths[from], iov, timeout,
                Objects.requireNonNull(done, "done")::sent);
        return true;
    }

    /**
     * Posted as one receive of UCX's IOV datatype where this manager takes vectored writes
     * ({@link UcxSettings#vectoredWrites()}, off by default); else false, nothing posted (host memory only, too).
     */
    @Override
    public boolean recvvAsync(int tag, MemoryBuffer[] buffers, long[] offsets, long[] lengths, int from, int count,
                              Duration timeout, dev.kvtransfer.api.transport.RecvCompletion done) {
        long[][] iov = iov(buffers, offsets, lengths, from, count);
        if (iov == null || !manager.settings().vectoredWrites()) {
            return false;
        }
        manager.postAsync(UcxOp.RECV, this, tag, buffers[from], offsets[from], lengths[from], iov, timeout,
                Objects.requireNonNull(done, "done"));
        return true;
    }

    /** The ranges' addresses and lengths, each range checked against its buffer; null when one is not host memory. */
    private static long[][] iov(MemoryBuffer[] buffers, long[] offsets, long[] lengths, int from, int count) {
        if (count < 1) {
            throw new IllegalArgumentException("a vectored message needs at least one range, not " + count);
        }
        Objects.checkFromIndexSize(from, count, buffers.length);
        Objects.checkFromIndexSize(from, count, offsets.length);
        Objects.checkFromIndexSize(from, count, lengths.length);
        long[] addresses = new long[count];
        long[] sizes = new long[count];
        for (int i = 0; i < count; i++) {
            MemoryBuffer b = buffers[from + i];
            if (b.kind() == dev.kvtransfer.api.memory.MemoryKind.DEVICE) {
                return null;
            }
            Objects.checkFromIndexSize(offsets[from + i], lengths[from + i], b.size());
            addresses[i] = b.address() + offsets[from + i];
            sizes[i] = lengths[from + i];
        }
        return new long[][] {addresses, sizes};
    }

    @Override
    public void write(dev.kvtransfer.api.transport.WriteBatch batch, Duration timeout) {
        manager.write(this, batch, timeout);
    }

    @Override
    public String peer() {
        return peer;
    }

    /**
     * What this backend knows of UCX's path (jucx 1.12.1 cannot show the lane or the threshold UCX picked at run
     * time): shared-memory mode with CMA, a message above {@link Connection#EAGER_LIMIT} is a rendezvous UCX
     * completes with one {@code process_vm_readv}, and a smaller one an eager copy into the shared FIFO and out of
     * it (two); without CMA, two at any size. {@code net} mode over TCP: four up to the eager limit (a copy into
     * UCX's buffer, the socket write and read, the copy out); above it the lane is UCX's choice: unknown. A send
     * this backend buffers ({@code ucx.bufferedSendBytes}, 16 KiB) adds one copy.
     */
    @Override
    public int copiesPerByte(long length) {
        UcxSettings s = manager.settings();
        int buffered = length <= s.bufferedSendBytes() ? 1 : 0;
        if (s.sharedMemory()) {
            return (s.cma() && length > EAGER_LIMIT ? 1 : 2) + buffered;
        }
        return length <= EAGER_LIMIT ? 4 + buffered : COPIES_UNKNOWN;
    }

    /** Emulated writes (the default) are messages received into place; native puts are UCX's choice: unknown. */
    @Override
    public int writeCopiesPerByte(long length) {
        return manager.settings().emulatedOneSided() ? copiesPerByte(length) : COPIES_UNKNOWN;
    }

    @Override
    public String toString() {
        return "UcxConnection{" + manager.localAddress() + " -> " + peer + ", in=" + inId
                + (failure != null ? ", failed: " + failure.message() : "") + "}";
    }
}
