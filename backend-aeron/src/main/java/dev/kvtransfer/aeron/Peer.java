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
    /**
     * CTS / REJECT that came before their send's wait reached the agent, by seq: {when (nanoTime), 1 = CTS}. A
     * sender queues its wait before it offers the RTS, but another producer of the command queue that claimed an
     * earlier slot and was descheduled before filling it hides every later command until it does, so the answer can
     * come first. Rare; dropped after {@link Matcher#EARLY_CLEAR_NS} (a sender that gave up never takes its own).
     */
    final Long2ObjectHashMap<long[]> earlyClears = new Long2ObjectHashMap<>();
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
    /** When its stream was last held back (a message beyond the early bounds), for timeout messages; 0 = never. */
    volatile long heldBackNs;
    volatile int heldBackType;
    volatile int heldBackTag;
    /** CTS / REJECT that found no waiting send (its sender gave up, or a stray one), and the last one's seq. */
    volatile long strayClears;
    volatile long lastStrayClear;

    Peer(String address, AeronConnectionManager manager) {
        this.address = address;
        this.connection = new AeronConnection(manager, this);
    }

    boolean hasArrivals() {
        return earlyCount > 0;
    }

    /** Agent only: a message of this peer was not consumed (the early bounds are full); its stream waits. */
    void heldBack(int type, int tag) {
        heldBackType = type;
        heldBackTag = tag;
        heldBackNs = System.nanoTime();
    }

    /**
     * What a timed-out caller is told of this peer's stream and of the tag it waited on (read racily from a caller
     * thread: a diagnosis, not a decision).
     */
    String flowNote(int tag) {
        StringBuilder b = new StringBuilder();
        b.append(earlyCount).append(" early messages (").append(earlyBytes).append(" B) held from it");
        try {
            TagQueue q = tags.get(tag);
            b.append("; tag ").append(tag).append(": ").append(q == null ? 0 : q.arrivals.size())
                    .append(" held, ").append(q == null ? 0 : q.posted.size()).append(" receives posted; ")
                    .append(activeLarge.size()).append(" large receives in progress, ").append(awaitingCts.size())
                    .append(" sends awaiting CTS, ").append(pendingControlCount).append(" CTS/REJECT unsent");
            ImageState img = image;
            b.append("; its stream: ").append(img == null ? "none bound" : "state " + img.state + ", assembling "
                    + img.assemble + ", position " + img.image.position() + (img.image.isClosed() ? ", closed"
                    : "") + (img.image.isEndOfStream() ? ", ended" : "") + (img.peer == this ? ""
                    : ", bound to another peer object"));
            if (strayClears > 0) {
                b.append("; ").append(strayClears).append(" CTS/REJECT found no waiting send, the last for seq ")
                        .append(lastStrayClear);
            }
        } catch (RuntimeException e) {
            b.append("; (state unreadable: ").append(e).append(')');
        }
        long at = heldBackNs;
        if (at != 0) {
            b.append("; held back ").append((System.nanoTime() - at) / 1_000_000).append(" ms ago at ")
                    .append(Wire.typeName(heldBackType)).append(" of tag ").append(heldBackTag)
                    .append(" (early bounds full)");
        }
        return b.toString();
    }

    /** @return the tail of a timed-out receive's message: bytes that arrived, and the peer's {@link #flowNote} */
    static String flowNote(Peer p, int tag, long received, long seq) {
        return (received > 0 ? " with " + received + " B arrived" : "") + (seq != 0 ? " (matched RTS " + seq + ")"
                : "") + (p == null ? "" : "; " + p.flowNote(tag));
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
