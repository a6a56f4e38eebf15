package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import org.agrona.CloseHelper;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The connection to one peer: an exclusive publication to the peer's listen address (created on first use,
 * starting with a HELLO that names us), and receives served by the manager's demultiplexer.
 *
 * <p>An exclusive publication (rather than a shared one) gives every manager its own Aeron session even when
 * several managers share one driver, so the receiver can tell them apart; offers are serialised by a lock held
 * for one offer only, so chunks of concurrent large sends and small control messages interleave.
 */
final class AeronConnection implements Connection {
    private final AeronConnectionManager manager;
    final AeronConnectionManager.Peer peer;
    private final AtomicLong nextSeq = new AtomicLong();

    private final ReentrantLock offerLock = new ReentrantLock();
    // Guarded by offerLock: the publication's lifetime and the scratch flyweights of one offer.
    private ExclusivePublication publication;
    private boolean shut;
    private final UnsafeBuffer header = new UnsafeBuffer(new byte[Wire.HEADER_LENGTH]);
    private final UnsafeBuffer payload = new UnsafeBuffer(0, 0);

    private final ReentrantLock establishLock = new ReentrantLock();
    private volatile boolean established;
    private volatile boolean everConnected;
    private volatile long openedNanos = System.nanoTime();
    private volatile long lastOfferNanos = System.nanoTime() - 1_000_000_000L;
    private volatile String channel;

    AeronConnection(AeronConnectionManager manager, AeronConnectionManager.Peer peer) {
        this.manager = manager;
        this.peer = peer;
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        AeronConnectionManager.checkBuffer(buffer, offset, length);
        Objects.requireNonNull(timeout, "timeout");
        long deadline = AeronConnectionManager.deadline(timeout);
        manager.ensureOpen();
        if (peer.lost) {
            throw manager.peerLostError(peer, "send of tag " + tag);
        }
        establish(deadline);
        long seq = nextSeq.incrementAndGet();
        long address = buffer.address() + offset;
        if (length <= manager.settings.eagerLimit()) {
            offer(Wire.EAGER, tag, seq, length, address, (int) length, deadline);
            return;
        }
        AeronConnectionManager.SendOp op = manager.registerSend(peer, seq);
        try {
            offer(Wire.RTS, tag, seq, length, 0, 0, deadline);
            manager.awaitClear(peer, op, tag, length, deadline);
        } catch (TransportException e) {
            manager.unregisterSend(peer, op);
            if (e.code() == ErrorCode.TIMEOUT) {
                // Take the stale RTS back so it cannot match the receiver's next recv of this tag.
                try {
                    offer(Wire.CANCEL, tag, seq, 0, 0, 0, System.nanoTime() + 100_000_000L);
                } catch (TransportException ignored) {
                    // best effort: the receiver's recv then times out instead
                }
            }
            throw e;
        }
        int chunk = manager.settings.chunk;
        for (long pos = 0; pos < length; pos += chunk) {
            int n = (int) Math.min(chunk, length - pos);
            offer(Wire.DATA, tag, seq, pos, address + pos, n, deadline);
        }
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.receive(peer, tag, buffer, offset, length, timeout);
    }

    @Override
    public String peer() {
        return peer.address;
    }

    @Override
    public String toString() {
        return "AeronConnection{" + manager.name + " -> " + peer.address + (peer.lost ? " lost" : "") + "}";
    }

    @Override
    public Duration defaultTimeout() {
        return manager.settingsTimeout();
    }

    /** Sends a small control message (CTS, REJECT) back to this peer. */
    void sendControl(int type, int tag, long seq, long deadline) {
        establish(deadline);
        offer(type, tag, seq, 0, 0, 0, deadline);
    }

    /** Creates the publication, waits until the peer's driver answers, then sends HELLO (always first). */
    private void establish(long deadline) {
        if (established) {
            return;
        }
        // A lock with a deadline: another sender may be waiting for the same unreachable peer with a longer one.
        try {
            if (!establishLock.tryLock(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                throw new TransportException(ErrorCode.TIMEOUT, "aeron " + manager.name + ": connecting to "
                        + peer.address + " did not finish before the deadline");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "aeron " + manager.name + ": interrupted while"
                    + " connecting to " + peer.address, e);
        }
        try {
            if (established) {
                return;
            }
            ExclusivePublication pub;
            offerLock.lock();
            try {
                if (shut) {
                    throw closedOrLost("connect");
                }
                if (publication == null) {
                    try {
                        openedNanos = System.nanoTime();
                        publication = newPublication();
                    } catch (RuntimeException e) {
                        if (manager.isClosed()) {
                            throw new TransportClosedException("aeron " + manager.name + " closed while connecting to "
                                    + peer.address);
                        }
                        throw new TransportException(ErrorCode.NETWORK, "aeron " + manager.name
                                + ": cannot open a publication to " + peer.address + ": " + e, e);
                    }
                }
                pub = publication;
            } finally {
                offerLock.unlock();
            }
            IdleStrategy idle = manager.settings.newIdleStrategy();
            while (!pub.isConnected()) {
                checkAlive("connect");
                if (System.nanoTime() - deadline >= 0) {
                    throw new TransportException(ErrorCode.TIMEOUT, "aeron " + manager.name + ": peer " + peer.address
                            + " did not answer (no subscriber there?) before the deadline");
                }
                idle.idle();
            }
            everConnected = true;
            byte[] self = manager.localAddress().getBytes(StandardCharsets.UTF_8);
            UnsafeBuffer hello = new UnsafeBuffer(new byte[self.length]);
            hello.putBytes(0, self);
            offerBuffer(Wire.HELLO, 0, 0, self.length, hello, self.length, deadline);
            established = true;
        } finally {
            establishLock.unlock();
        }
    }

    /** Offers one message from raw memory, retrying on back-pressure until the deadline. */
    private void offer(int type, int tag, long seq, long value, long address, int length, long deadline) {
        IdleStrategy idle = null;
        while (true) {
            long r;
            offerLock.lock();
            try {
                if (shut) {
                    r = Publication.CLOSED;
                } else {
                    writeHeader(type, tag, seq, value);
                    if (length == 0) {
                        r = publication.offer(header, 0, Wire.HEADER_LENGTH);
                    } else {
                        payload.wrap(address, length);
                        r = publication.offer(header, 0, Wire.HEADER_LENGTH, payload, 0, length);
                    }
                }
            } finally {
                offerLock.unlock();
            }
            if (r > 0) {
                lastOfferNanos = System.nanoTime();
                return;
            }
            handleRefusal(r, type, tag, deadline);
            if (idle == null) {
                idle = manager.settings.newIdleStrategy();
            }
            idle.idle();
        }
    }

    private void offerBuffer(int type, int tag, long seq, long value, UnsafeBuffer body, int length, long deadline) {
        IdleStrategy idle = manager.settings.newIdleStrategy();
        while (true) {
            long r;
            offerLock.lock();
            try {
                if (shut) {
                    r = Publication.CLOSED;
                } else {
                    writeHeader(type, tag, seq, value);
                    r = publication.offer(header, 0, Wire.HEADER_LENGTH, body, 0, length);
                }
            } finally {
                offerLock.unlock();
            }
            if (r > 0) {
                return;
            }
            handleRefusal(r, type, tag, deadline);
            idle.idle();
        }
    }

    private void writeHeader(int type, int tag, long seq, long value) {
        header.putInt(Wire.TYPE, type, ByteOrder.LITTLE_ENDIAN);
        header.putInt(Wire.TAG, tag, ByteOrder.LITTLE_ENDIAN);
        header.putLong(Wire.SEQ, seq, ByteOrder.LITTLE_ENDIAN);
        header.putLong(Wire.VALUE, value, ByteOrder.LITTLE_ENDIAN);
        header.putLong(Wire.VALUE + 8, 0, ByteOrder.LITTLE_ENDIAN);
    }

    private void handleRefusal(long r, int type, int tag, long deadline) {
        String what = Wire.typeName(type) + " of tag " + tag;
        if (r == Publication.CLOSED) {
            throw closedOrLost(what);
        }
        if (r == Publication.MAX_POSITION_EXCEEDED) {
            throw new TransportException(ErrorCode.NETWORK, "aeron " + manager.name + ": publication to "
                    + peer.address + " reached its maximum position; reconnect");
        }
        checkAlive(what);
        if (System.nanoTime() - deadline >= 0) {
            throw new TransportException(ErrorCode.TIMEOUT, "aeron " + manager.name + ": " + what + " to "
                    + peer.address + " timed out (" + (r == Publication.NOT_CONNECTED ? "not connected"
                    : "back-pressured") + ")");
        }
    }

    private void checkAlive(String what) {
        if (manager.isClosed()) {
            throw new TransportClosedException("aeron " + manager.name + " closed during " + what + " to "
                    + peer.address);
        }
        if (peer.lost) {
            throw manager.peerLostError(peer, what);
        }
    }

    private TransportException closedOrLost(String what) {
        if (manager.isClosed()) {
            return new TransportClosedException("aeron " + manager.name + " closed during " + what + " to "
                    + peer.address);
        }
        if (peer.lost) {
            return manager.peerLostError(peer, what);
        }
        return new TransportException(ErrorCode.NETWORK, "aeron " + manager.name + ": publication to "
                + peer.address + " closed during " + what);
    }

    /**
     * Waits (until the deadline) for the driver to have sent everything offered, while the peer is connected.
     *
     * @param deadline System.nanoTime() deadline
     * @return true when this connection offered something in the last half second
     */
    boolean drain(long deadline) {
        ExclusivePublication p;
        offerLock.lock();
        try {
            p = shut ? null : publication;
        } finally {
            offerLock.unlock();
        }
        if (p == null) {
            return false;
        }
        if (channel.startsWith(AeronSettings.IPC_CHANNEL)) {
            // An IPC log lives in the driver the peer shares; a closed IPC publication stays readable until its
            // subscribers have consumed it (Aeron drains it before removing it), so there is nothing to wait for.
            // Its publisher limit is not tied to a sender position: the test below would wait out the deadline.
            return false;
        }
        // The publisher limit runs half a term ahead of the driver's sender position.
        IdleStrategy idle = manager.settings.newIdleStrategy();
        while (p.isConnected() && p.position() > p.positionLimit() - p.termBufferLength() / 2
                && System.nanoTime() - deadline < 0) {
            idle.idle();
        }
        return System.nanoTime() - lastOfferNanos < 500_000_000L;
    }

    /** @return true once the publication had a subscriber and has lost it (no status messages any more) */
    boolean lostConnection() {
        offerLock.lock();
        try {
            if (shut || publication == null) {
                return false;
            }
            if (publication.isConnected()) {
                everConnected = true;
                return false;
            }
            // Lost once connected and silent again, or never answered within the peer timeout (the peer may have
            // died between our learning its address and our first look).
            return everConnected || System.nanoTime() - openedNanos > manager.settings.peerTimeoutNs;
        } finally {
            offerLock.unlock();
        }
    }

    /**
     * Opens the publication now (without waiting for the peer), so the peer's liveness is watched even before
     * the first send: a peer we only receive from, or wait on, still shows up as lost when it dies.
     */
    void open() {
        offerLock.lock();
        try {
            if (!shut && publication == null && !manager.isClosed()) {
                openedNanos = System.nanoTime();
                publication = newPublication();
            }
        } catch (RuntimeException e) {
            // establish() retries and reports it with the call that needs the publication
            manager.onError(e);
        } finally {
            offerLock.unlock();
        }
    }

    /**
     * Creates the publication (caller holds the offer lock): {@code aeron:ipc} to the peer's IPC stream when the
     * peer is a manager of this process on the same driver, else UDP to its address.
     */
    private ExclusivePublication newPublication() {
        int ipcStream = manager.ipcStreamOf(peer.address);
        String ch = ipcStream >= 0 ? manager.ipcPublicationChannel() : manager.publicationChannel(peer.address);
        ExclusivePublication p = manager.aeron.addExclusivePublication(ch,
                ipcStream >= 0 ? ipcStream : AeronSettings.STREAM_ID);
        channel = ch;
        return p;
    }

    /**
     * @return the channel of this connection's publication ({@code aeron:ipc?...} or {@code aeron:udp?...}), null
     *         before it is opened
     */
    String channel() {
        return channel;
    }

    /** Closes the publication; later offers fail. Taking the offer lock waits out an offer in progress. */
    void shutdown() {
        ExclusivePublication p;
        offerLock.lock();
        try {
            shut = true;
            p = publication;
            publication = null;
        } finally {
            offerLock.unlock();
        }
        CloseHelper.quietClose(p);
    }
}
