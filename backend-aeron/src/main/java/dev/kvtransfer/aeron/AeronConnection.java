package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import org.agrona.CloseHelper;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The connection to one peer: an exclusive publication to the peer's address ({@code aeron:ipc} when the peer is
 * on our media driver, UDP otherwise), opened without blocking (Aeron's async add, polled) and started with our
 * HELLO; receives are served by the manager's agent.
 *
 * <p>An exclusive publication gives every manager its own Aeron session even when several managers share one
 * driver, so the receiver can tell them apart. Offers are serialised by a lock held for one offer only (callers'
 * eager messages and data chunks, and the agent's CTS, which only ever tries the lock): chunks of concurrent large
 * sends and small control messages interleave. Sends allocate nothing: the header is a reused buffer and the
 * payload is offered straight from the caller's memory.
 */
final class AeronConnection implements Connection {
    /** {@link #liveness} results. */
    static final int ALIVE = 0;
    static final int LOST_AFTER_CONNECTED = 1;
    static final int NEVER_ANSWERED = 2;

    private static final int NEW = 0;
    private static final int ADDING = 1;
    private static final int CONNECTING = 2;
    private static final int HELLO = 3;
    private static final int ESTABLISHED = 4;
    private static final int FAILED = 5;

    private final AeronConnectionManager manager;
    final Peer peer;
    private final AtomicLong nextSeq = new AtomicLong();

    private final ReentrantLock offerLock = new ReentrantLock();
    // Guarded by offerLock: the publication's lifetime and the scratch flyweights of one offer.
    private ExclusivePublication publication;
    private boolean shut;
    private final UnsafeBuffer header = new UnsafeBuffer(ByteBuffer.allocateDirect(Wire.HEADER_LENGTH));
    private final UnsafeBuffer payload = new UnsafeBuffer(0, 0);
    /** The peer's doorbell when it is on our driver (IPC): rung after each offer, under the offer lock. */
    private Doorbell.Target bell;

    // Establishment: a non-blocking state machine, stepped under establishLock by callers and by the agent.
    private final ReentrantLock establishLock = new ReentrantLock();
    private int estState = NEW;
    private volatile long registrationId = -1;
    private Aeron client;
    private volatile boolean established;
    private volatile TransportException establishFailure;
    private volatile String channel;
    private UnsafeBuffer hello;
    // Liveness (agent reads; establishment writes).
    private volatile long openedNs;
    /** Whether the last one-sided batch was copied whole through shared memory. */
    private volatile boolean sharedWrites;
    /** {@link #copiesPerByte}, once known (0 before). */
    private volatile int copies;
    private volatile boolean everConnected;

    /** Tests: a large send's wait reaches the agent only after its CTS did (the order a command-queue race makes). */
    static volatile boolean waitAfterClearForTest;

    AeronConnection(AeronConnectionManager manager, Peer peer) {
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
        long address = buffer.address() + offset;
        if (length <= manager.settings.eagerLimit) {
            offer(Wire.EAGER, tag, 0, length, address, (int) length, deadline);
            manager.counters.sent(length);
            return;
        }
        long seq = nextSeq.incrementAndGet();
        Op op = manager.takeOp().reset(Op.AWAIT_CTS, peer, tag, 0, length);
        op.seq = seq;
        boolean late = waitAfterClearForTest;
        if (!late) {
            manager.post(op);
        }
        try {
            offer(Wire.RTS, tag, seq, length, 0, 0, deadline);
        } catch (TransportException e) {
            manager.withdraw(op);
            throw e;
        }
        if (late) {
            // As a producer descheduled in an earlier slot of the command queue makes it: the CTS comes first.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (peer.lastStrayClear != seq && System.nanoTime() - until < 0) {
                Thread.onSpinWait();
            }
            manager.post(op);
        }
        int st = manager.await(op, deadline, deadline);
        if (st == Op.CANCELLED) {
            // Take the stale RTS back so it cannot match the receiver's next recv of this tag.
            try {
                offer(Wire.CANCEL, tag, seq, 0, 0, 0, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(100));
            } catch (TransportException ignored) {
                // best effort: the receiver's recv then fails by its own deadline instead
            }
            throw new TransportException(ErrorCode.TIMEOUT, "aeron " + manager.name + ": send of tag " + tag + " ("
                    + length + " B) to " + peer.address + " timed out after " + timeout.toMillis() + " ms waiting"
                    + " for the receiver to post a matching recv (RTS seq " + seq + "); " + peer.flowNote(tag));
        }
        manager.throwIfFailed(op);
        manager.recycle(op);
        int chunk = manager.settings.chunk;
        for (long pos = 0; pos < length; pos += chunk) {
            int n = (int) Math.min(chunk, length - pos);
            offer(Wire.DATA, tag, seq, pos, address + pos, n, deadline);
        }
        manager.counters.sent(length);
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.receive(peer, tag, buffer, offset, length, timeout);
    }

    /** Posted: the agent matches it like a blocking receive and calls {@code done} from its duty cycle. */
    @Override
    public boolean recvAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                             RecvCompletion done) {
        manager.receiveAsync(peer, tag, buffer, offset, length, timeout, done);
        return true;
    }

    @Override
    public void write(WriteBatch batch, Duration timeout) {
        sharedWrites = manager.oneSided().write(this, batch, timeout) == batch.totalBytes() && batch.size() > 0;
    }

    /** Sums in the copy's pass where the bytes go through shared memory; declines (writes nothing) otherwise. */
    @Override
    public boolean writeSummed(WriteBatch batch, Duration timeout, int[] crc32c) {
        long shared = manager.oneSided().writeSummed(this, batch, timeout, crc32c);
        if (shared < 0) {
            return false;
        }
        sharedWrites = shared == batch.totalBytes() && batch.size() > 0;
        return true;
    }

    @Override
    public String peer() {
        return peer.address;
    }

    /**
     * IPC: two passes at any length, the offer into the shared log buffer and the copy out of it into the receive
     * (an eager message that arrives before its receive adds a third, through staging; a larger one waits for
     * the receive's clear-to-send and has none). UDP: five, the offer, the driver's {@code sendmsg} and
     * {@code recvmsg} (kernel), the driver's insert into the image's log buffer, and the copy out.
     */
    @Override
    public int copiesPerByte(long length) {
        int c = copies;
        if (c == 0) {
            // The peer's address and this manager's IPC stream never change: parsed once, not per message.
            c = manager.ipcStreamTo(manager.addressOf(peer)) != 0 ? 2 : 5;
            copies = c;
        }
        return c;
    }

    /**
     * One pass when the last batch on this connection went through the peer's shared pool file ({@code ShmWriter}:
     * a copy from the writer's memory into the owner's pool), else emulated ({@code EmulatedOneSided}): each entry
     * is a message received into place.
     */
    @Override
    public int writeCopiesPerByte(long length) {
        return sharedWrites ? 1 : copiesPerByte(length);
    }

    @Override
    public Duration defaultTimeout() {
        return manager.defaultTimeout();
    }

    @Override
    public String toString() {
        return "AeronConnection{" + manager.name + " -> " + peer.address + (peer.lost ? " lost" : "") + "}";
    }

    boolean isEstablished() {
        return established;
    }

    /** @return the registration id of our publication to the peer (-1 before it was asked for) */
    long registrationId() {
        return registrationId;
    }

    /** Blocks (bounded by the deadline) until the publication is connected and our HELLO is out. */
    private void establish(long deadline) {
        if (established) {
            return;
        }
        IdleStrategy idle = null;
        while (true) {
            if (progressEstablish(true)) {
                return;
            }
            checkAlive("connect");
            if (System.nanoTime() - deadline >= 0) {
                throw new TransportException(ErrorCode.TIMEOUT, "aeron " + manager.name + ": connecting to "
                        + peer.address + " did not finish before the deadline ("
                        + (everConnected ? "HELLO not out" : openedNs == 0 ? "publication not created"
                        : "no subscriber answered") + ")");
            }
            if (idle == null) {
                idle = manager.settings.callerIdleStrategy();
            }
            idle.idle();
        }
    }

    /**
     * One non-blocking step of establishment (callers and the agent; the agent only ever tries the lock).
     *
     * @param caller true on a caller thread: failures are thrown
     * @return true once established (or, for the agent, once nothing more can be done: failed or shut)
     */
    boolean progressEstablish(boolean caller) {
        if (established) {
            return true;
        }
        TransportException f = establishFailure;
        if (f != null) {
            if (caller) {
                throw AeronConnectionManager.rethrow(f);
            }
            return true;
        }
        if (!establishLock.tryLock()) {
            return false;
        }
        try {
            return step();
        } catch (TransportException e) {
            establishFailure = e;
            if (caller) {
                throw e;
            }
            manager.reporter.report(e);
            return true;
        } catch (RuntimeException e) {
            TransportException t = new TransportException(ErrorCode.NETWORK, "aeron " + manager.name + ": cannot open a publication to " + peer.address + ": " + e, e);
            establishFailure = t;
            if (caller) {
                throw t;
            }
            manager.reporter.report(t);
            return true;
        } finally {
            establishLock.unlock();
        }
    }

    private boolean step() {
        switch (estState) {
            case NEW: {
                if (manager.isClosed() || peer.lost) {
                    return false;
                }
                client = manager.runtime.client();
                Address a = manager.addressOf(peer);
                int ipcStream = manager.ipcStreamTo(a);
                String ch = ipcStream != 0 ? manager.ipcPublicationChannel() : manager.publicationChannel(a);
                channel = ch;
                if (ipcStream != 0 && manager.settings.doorbell) {
                    Doorbell.Target t = new Doorbell.Target(manager.runtime.directory(), ipcStream);
                    offerLock.lock();
                    try {
                        bell = t;
                    } finally {
                        offerLock.unlock();
                    }
                }
                registrationId = client.asyncAddExclusivePublication(ch, ipcStream != 0 ? ipcStream
                        : AeronSettings.STREAM_ID);
                estState = ADDING;
                return false;
            }
            case ADDING: {
                ExclusivePublication pub = client.getExclusivePublication(registrationId);
                if (pub == null) {
                    return false;
                }
                offerLock.lock();
                try {
                    if (shut) {
                        CloseHelper.quietClose(pub);
                        estState = FAILED;
                        throw closedOrLost("connect");
                    }
                    publication = pub;
                } finally {
                    offerLock.unlock();
                }
                openedNs = System.nanoTime();
                estState = CONNECTING;
                return false;
            }
            case CONNECTING: {
                ExclusivePublication pub = publication;
                if (pub == null || !pub.isConnected()) {
                    return false;
                }
                everConnected = true;
                estState = HELLO;
                return sendHello();
            }
            case HELLO:
                return sendHello();
            case ESTABLISHED:
                return true;
            default:
                throw closedOrLost("connect");
        }
    }

    private boolean sendHello() {
        if (hello == null) {
            hello = new UnsafeBuffer(ByteBuffer.allocateDirect(Wire.HEADER_LENGTH + Handshake.maxLength()));
        }
        int body = manager.handshake.encode(hello, Wire.HEADER_LENGTH, manager.localAddress(), peer.address,
                manager.incarnation);
        Wire.write(hello, Wire.HELLO, 0, 0, body);
        long r;
        offerLock.lock();
        try {
            r = shut ? Publication.CLOSED : publication.offer(hello, 0, Wire.HEADER_LENGTH + body);
            rang(r);
        } finally {
            offerLock.unlock();
        }
        if (r > 0) {
            estState = ESTABLISHED;
            established = true;
            return true;
        }
        if (r == Publication.CLOSED || r == Publication.MAX_POSITION_EXCEEDED) {
            estState = FAILED;
            throw closedOrLost("HELLO");
        }
        return false;
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
                    Wire.write(header, type, tag, seq, value);
                    if (length == 0) {
                        r = publication.offer(header, 0, Wire.HEADER_LENGTH);
                    } else {
                        payload.wrap(address, length);
                        r = publication.offer(header, 0, Wire.HEADER_LENGTH, payload, 0, length);
                    }
                    rang(r);
                }
            } finally {
                offerLock.unlock();
            }
            if (r > 0) {
                return;
            }
            handleRefusal(r, type, tag, deadline);
            if (idle == null) {
                idle = manager.settings.callerIdleStrategy();
            }
            idle.idle();
        }
    }

    /**
     * Agent: offers a control message without blocking.
     *
     * @return false when it could not go out now (not established, lock busy, back-pressure): try again later
     */
    boolean tryOfferControl(int type, int tag, long seq) {
        if (!established) {
            return false;
        }
        if (!offerLock.tryLock()) {
            return false;
        }
        try {
            if (shut) {
                return true; // nobody to tell any more: drop it
            }
            Wire.write(header, type, tag, seq, 0);
            long r = publication.offer(header, 0, Wire.HEADER_LENGTH);
            rang(r);
            return r > 0 || r == Publication.CLOSED || r == Publication.MAX_POSITION_EXCEEDED;
        } finally {
            offerLock.unlock();
        }
    }

    /** Under the offer lock, after an offer: wakes the peer's agent when it sleeps on its doorbell. */
    private void rang(long offerResult) {
        Doorbell.Target t = bell;
        if (offerResult > 0 && t != null && t.ring()) {
            manager.counters.doorbellRings.increment();
        }
    }

    /** A refused offer: throws when it is final; back-pressure (the common case) allocates nothing. */
    private void handleRefusal(long r, int type, int tag, long deadline) {
        if (r == Publication.CLOSED) {
            throw closedOrLost(Wire.typeName(type) + " of tag " + tag);
        }
        if (r == Publication.MAX_POSITION_EXCEEDED) {
            throw new TransportException(ErrorCode.NETWORK, "aeron " + manager.name + ": publication to "
                    + peer.address + " reached its maximum position; reconnect");
        }
        if (manager.isClosed() || peer.lost) {
            checkAlive(Wire.typeName(type) + " of tag " + tag);
        }
        if (System.nanoTime() - deadline >= 0) {
            String what = Wire.typeName(type) + " of tag " + tag;
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
     * Agent, every liveness check: whether our publication says the peer is gone.
     *
     * @param stalled true when our own process stalled since the last check: never-answered clocks restart
     */
    int liveness(long now, boolean stalled) {
        ExclusivePublication p = publication;
        if (p == null || shut) {
            return ALIVE;
        }
        if (p.isConnected()) {
            everConnected = true;
            return ALIVE;
        }
        if (everConnected) {
            return LOST_AFTER_CONNECTED; // Aeron: no status message for the publication connection timeout
        }
        if (stalled) {
            openedNs = now;
            return ALIVE;
        }
        return now - openedNs > manager.settings.connectTimeoutNs ? NEVER_ANSWERED : ALIVE;
    }

    /**
     * Waits (until the deadline) for the driver to have sent everything offered, while the peer is connected.
     * IPC needs no wait: the log lives in the driver both share and stays readable until consumed.
     */
    void drain(long deadline) {
        ExclusivePublication p;
        offerLock.lock();
        try {
            p = shut ? null : publication;
        } finally {
            offerLock.unlock();
        }
        String ch = channel;
        if (p == null || ch == null || ch.startsWith(AeronSettings.IPC_CHANNEL)) {
            return;
        }
        // The publisher limit runs half a term ahead of the driver's sender position.
        IdleStrategy idle = manager.settings.newIdleStrategy();
        while (p.isConnected() && p.position() > p.positionLimit() - p.termBufferLength() / 2
                && System.nanoTime() - deadline < 0) {
            idle.idle();
        }
    }

    /** @return the channel of this connection's publication, null before it is opened (tests) */
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
        // A publication still being added would otherwise outlive us in the driver.
        if (p == null && establishLock.tryLock()) {
            try {
                if (estState == ADDING && registrationId >= 0 && client != null && !client.isClosed()) {
                    try {
                        client.asyncRemovePublication(registrationId);
                    } catch (RuntimeException e) {
                        manager.reporter.report(e);
                    }
                }
                estState = FAILED;
            } finally {
                establishLock.unlock();
            }
        }
    }
}
