package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import org.agrona.collections.Int2ObjectHashMap;
import org.agrona.collections.Long2ObjectHashMap;

import java.util.ArrayDeque;

/**
 * A peer manager as this manager knows it, by its address: the caller-facing {@link AeronConnection} (our
 * publication to it) and, owned by the agent, what its stream to us brought: messages held per tag before their
 * receive, receives waiting per tag, large receives in progress and large sends waiting for its clear-to-send.
 * A peer object lives until the peer is lost (its stream went away, it stopped answering, it restarted, the
 * manager closed); a later {@code connection(address)} then creates a fresh one. A lost peer whose early messages
 * were not read yet lingers (bounded in time) so they stay readable.
 */
final class Peer {
    final String address;
    final AeronConnection connection;

    // Agent only.
    final Int2ObjectHashMap<TagQueue> tags = new Int2ObjectHashMap<>();
    final Long2ObjectHashMap<Op> activeLarge = new Long2ObjectHashMap<>();
    final Long2ObjectHashMap<Op> awaitingCts = new Long2ObjectHashMap<>();
    /** Control messages (CTS, REJECT) the agent could not offer yet: triples (type, tag, seq). */
    long[] pendingControl = new long[12];
    int pendingControlCount;
    /** The stream from this peer that completed the handshake, or null. */
    ImageState image;
    long incarnation;
    long earlyBytes;
    long earlyCount;
    boolean known;
    long lingerUntilNs;

    // Shared with callers.
    volatile boolean lost;
    volatile String lostReason;
    /** What callers are told when the peer is lost: PEER_LOST, or UNAUTHORIZED when it refused our stream. */
    volatile ErrorCode lostCode = ErrorCode.PEER_LOST;

    Peer(String address, AeronConnectionManager manager) {
        this.address = address;
        this.connection = new AeronConnection(manager, this);
    }

    boolean hasArrivals() {
        return earlyCount > 0;
    }

    @Override
    public String toString() {
        return "Peer{" + address + (lost ? " lost: " + lostReason : "") + "}";
    }

    /** Per (peer, tag): messages that came before their receive, and receives waiting for a message. */
    static final class TagQueue {
        final ArrayDeque<Arrival> arrivals = new ArrayDeque<>(4);
        final ArrayDeque<Op> posted = new ArrayDeque<>(4);
        int tag;

        boolean isEmpty() {
            return arrivals.isEmpty() && posted.isEmpty();
        }
    }

    /** A message that arrived before its receive: a whole eager one (off-heap copy) or a large one's RTS. */
    static final class Arrival {
        int type;
        long seq;
        long length;
        long staging;
        int capacity;
        long stamp;
    }
}
