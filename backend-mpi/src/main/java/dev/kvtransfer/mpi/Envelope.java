package dev.kvtransfer.mpi;

import java.nio.ByteBuffer;

/**
 * The header every message starts with, and one queued message.
 *
 * <p>Wire form ({@value #HEADER_BYTES} bytes, little-endian), sent on the envelope communicator with MPI tag =
 * destination endpoint: magic {@code "KVM1"}, flags (bit 0: payload inline), source endpoint, destination
 * endpoint, our tag (any {@code int}), payload MPI tag on the data communicator (non-inline), length, chunk size
 * (non-inline). An inline message is header + payload in one MPI message; a larger one is the header alone
 * followed by {@code ceil(length / chunk)} MPI messages of the payload on the data communicator with its own
 * MPI tag, which the receiver takes straight into the caller's memory.
 */
final class Envelope {
    static final int HEADER_BYTES = 40;
    static final int MAGIC = 0x314d564b; // "KVM1" little-endian
    static final int FLAG_INLINE = 1;

    static final int AT_MAGIC = 0;
    static final int AT_FLAGS = 4;
    static final int AT_SOURCE_ENDPOINT = 8;
    static final int AT_DEST_ENDPOINT = 12;
    static final int AT_TAG = 16;
    static final int AT_PAYLOAD_TAG = 20;
    static final int AT_LENGTH = 24;
    static final int AT_CHUNK = 32;

    int link;
    int sourceRank;
    int sourceEndpoint;
    int tag;
    boolean inline;
    int payloadTag;
    long length;
    int chunk;
    /** Inline payload bytes held for a receive not posted yet (native memory, freed when taken), or 0. */
    long data;

    static void write(ByteBuffer b, boolean inline, int sourceEndpoint, int destEndpoint, int tag, int payloadTag,
                      long length, int chunk) {
        b.putInt(AT_MAGIC, MAGIC);
        b.putInt(AT_FLAGS, inline ? FLAG_INLINE : 0);
        b.putInt(AT_SOURCE_ENDPOINT, sourceEndpoint);
        b.putInt(AT_DEST_ENDPOINT, destEndpoint);
        b.putInt(AT_TAG, tag);
        b.putInt(AT_PAYLOAD_TAG, payloadTag);
        b.putLong(AT_LENGTH, length);
        b.putInt(AT_CHUNK, chunk);
        b.putInt(36, 0);
    }

    /**
     * Checks a received header against the MPI envelope it came in.
     *
     * @return null when it is well-formed, else what is wrong
     */
    static String check(ByteBuffer b, int count, int mpiTag, int tagUpperBound) {
        if (count < HEADER_BYTES) {
            return count + "-byte envelope (header is " + HEADER_BYTES + ")";
        }
        if (b.getInt(AT_MAGIC) != MAGIC) {
            return "bad magic 0x" + Integer.toHexString(b.getInt(AT_MAGIC));
        }
        int flags = b.getInt(AT_FLAGS);
        if ((flags & ~FLAG_INLINE) != 0) {
            return "unknown flags 0x" + Integer.toHexString(flags);
        }
        if (b.getInt(AT_DEST_ENDPOINT) != mpiTag) {
            return "destination endpoint " + b.getInt(AT_DEST_ENDPOINT) + " in an envelope for endpoint " + mpiTag;
        }
        if (b.getInt(AT_SOURCE_ENDPOINT) < 0) {
            return "negative source endpoint " + b.getInt(AT_SOURCE_ENDPOINT);
        }
        long length = b.getLong(AT_LENGTH);
        if ((flags & FLAG_INLINE) != 0) {
            if (length != count - HEADER_BYTES) {
                return "inline length " + length + " in a " + count + "-byte envelope";
            }
            return null;
        }
        if (count != HEADER_BYTES) {
            return "non-inline envelope of " + count + " bytes";
        }
        int chunk = b.getInt(AT_CHUNK);
        int payloadTag = b.getInt(AT_PAYLOAD_TAG);
        if (length <= 0 || chunk <= 0 || payloadTag < 0 || payloadTag > tagUpperBound) {
            return "non-inline envelope with length " + length + ", chunk " + chunk + ", payload tag " + payloadTag;
        }
        if ((length - 1) / chunk >= Integer.MAX_VALUE) {
            return "length " + length + " needs more than 2^31 chunks of " + chunk;
        }
        return null;
    }

    /** @return whether this came from (link, rank, endpoint); rank -1 matches any source */
    boolean from(int link, int rank, int endpoint) {
        return rank < 0 || (this.link == link && sourceRank == rank && sourceEndpoint == endpoint);
    }
}
