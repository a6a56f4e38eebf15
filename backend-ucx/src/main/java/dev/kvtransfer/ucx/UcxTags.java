package dev.kvtransfer.ucx;

/**
 * How our 32-bit tags and the sender's identity share UCX's 64-bit tag.
 *
 * <pre>
 *  bit 63      : reserved (0); a receive from any sender matches it, so such a message is never taken
 *  bits 32..62 : sender id, assigned (at random) by the RECEIVING manager to the peer in the bootstrap handshake
 *                (1 .. 2^31-1)
 *  bits 0..31  : the user's tag (any int, taken unsigned)
 * </pre>
 *
 * <p>UCX matches tags per worker, not per endpoint, so the sender id is what keeps two peers' messages of the
 * same tag apart, and what tells {@code recvConnect} (which matches any sender id) who sent.
 */
final class UcxTags {
    /** Reserved bit: part of the any-sender mask, set by no sender of this transport. */
    static final long CONTROL = 1L << 63;
    /** Mask of a receive from one sender: every bit. */
    static final long EXACT_MASK = -1L;
    /** Mask of a receive from any sender: control bit and user tag, not the sender id. */
    static final long ANY_SENDER_MASK = CONTROL | 0xFFFF_FFFFL;
    /** Largest sender id. */
    static final int MAX_SENDER_ID = Integer.MAX_VALUE;

    private UcxTags() {
    }

    /**
     * @param senderId the id the receiver gave to this sender
     * @param tag      user tag
     * @return the UCX tag
     */
    static long data(int senderId, int tag) {
        return ((long) senderId << 32) | (tag & 0xFFFF_FFFFL);
    }

    /**
     * @param tag user tag
     * @return the UCX tag a receive from any sender posts (with {@link #ANY_SENDER_MASK})
     */
    static long anySender(int tag) {
        return tag & 0xFFFF_FFFFL;
    }

    /**
     * @param ucxTag a received message's sender tag
     * @return the sender id in it
     */
    static int senderId(long ucxTag) {
        return (int) ((ucxTag >>> 32) & 0x7FFF_FFFFL);
    }
}
