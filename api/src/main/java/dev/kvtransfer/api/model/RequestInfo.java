package dev.kvtransfer.api.model;

import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.Arrays;
import java.util.Objects;

/**
 * What a generation rank sends each context counterpart to ask for a request's cache.
 *
 * @param requestId      the <em>context</em> request id
 * @param indexFromEnd   number of requested blocks minus one
 * @param lastBlockKey   key of the prompt's last block (tokens or hashes; may be empty)
 * @param requesterState the generation rank's own cache and comm state (its {@code selfIndex} set)
 * @param dataTag        the per-transfer tag the payload travels on (unique among in-flight transfers), at
 *                       least {@link Tags#FIRST_DATA_TAG} so it never collides with a control tag
 * @param chunkBytes     largest payload message the requester accepts; parts above it are sent in chunks of
 *                       exactly this size (last one shorter); 0 = no chunking
 */
public record RequestInfo(long requestId, int indexFromEnd, long[] lastBlockKey, TransceiverState requesterState,
                          int dataTag, long chunkBytes) {
    private static final int WIRE_TAG = 0x52; // 'R'

    /**
     * Validates.
     *
     * @param requestId      context request id
     * @param indexFromEnd   blocks minus one
     * @param lastBlockKey   last block key
     * @param requesterState the requester's state
     * @param dataTag        payload tag
     * @param chunkBytes     chunk size or 0
     */
    public RequestInfo {
        Objects.requireNonNull(lastBlockKey, "lastBlockKey");
        Objects.requireNonNull(requesterState, "requesterState");
        lastBlockKey = lastBlockKey.clone();
        if (indexFromEnd < -1) {
            throw new IllegalArgumentException("indexFromEnd = " + indexFromEnd + ": must be >= -1");
        }
        if (chunkBytes < 0) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ": must be >= 0");
        }
        if (dataTag < Tags.FIRST_DATA_TAG) {
            // A smaller tag could be one of the fixed control tags: payload would mix with control messages.
            throw new IllegalArgumentException("dataTag = " + dataTag + ": must be >= Tags.FIRST_DATA_TAG ("
                    + Tags.FIRST_DATA_TAG + ")");
        }
    }

    /**
     * The key of the prompt's last block.
     *
     * @return a copy of the key
     */
    @Override
    public long[] lastBlockKey() {
        return lastBlockKey.clone();
    }

    /**
     * Writes this request info as a whole message (magic, version, fields).
     *
     * @return the encoded bytes
     */
    public byte[] toBytes() {
        WireWriter w = WireWriter.message();
        writeTo(w);
        return w.toByteArray();
    }

    /**
     * Decodes a whole message written by {@link #toBytes()}.
     *
     * @param bytes the message
     * @return the request info
     * @throws MalformedMessageException on any bad byte, including trailing bytes
     */
    public static RequestInfo fromBytes(byte[] bytes) {
        WireReader r = WireReader.message(bytes);
        RequestInfo info = readFrom(r);
        r.expectEnd("RequestInfo");
        return info;
    }

    /**
     * Writes the fields (tag first) without a message header.
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        w.writeByte(WIRE_TAG);
        w.writeLong(requestId);
        w.writeInt(indexFromEnd);
        w.writeLongArray(lastBlockKey);
        requesterState.writeTo(w);
        w.writeInt(dataTag);
        w.writeLong(chunkBytes);
    }

    /**
     * Reads what {@link #writeTo(WireWriter)} wrote.
     *
     * @param r the reader
     * @return the request info
     * @throws MalformedMessageException on any bad byte
     */
    public static RequestInfo readFrom(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("RequestInfo tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected RequestInfo tag " + WIRE_TAG + ", found " + tag);
        }
        long id = r.readLong("requestId");
        int indexFromEnd = r.readInt("indexFromEnd", -1, Integer.MAX_VALUE);
        long[] key = r.readLongArray("lastBlockKey");
        TransceiverState state = TransceiverState.readFrom(r);
        int dataTag = r.readInt("dataTag", Tags.FIRST_DATA_TAG, Integer.MAX_VALUE);
        int chunkAt = r.offset();
        long chunk = r.readLong("chunkBytes");
        if (chunk < 0) {
            throw new MalformedMessageException(chunkAt, "chunkBytes = " + chunk + ": must be >= 0");
        }
        return new RequestInfo(id, indexFromEnd, key, state, dataTag, chunk);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof RequestInfo i && requestId == i.requestId && indexFromEnd == i.indexFromEnd
                && Arrays.equals(lastBlockKey, i.lastBlockKey) && requesterState.equals(i.requesterState)
                && requesterState.selfIndex() == i.requesterState.selfIndex()
                && dataTag == i.dataTag && chunkBytes == i.chunkBytes;
    }

    @Override
    public int hashCode() {
        return Objects.hash(requestId, indexFromEnd, Arrays.hashCode(lastBlockKey), requesterState, dataTag, chunkBytes);
    }

    @Override
    public String toString() {
        return "RequestInfo{request " + requestId + ", blocks " + (indexFromEnd + 1) + ", tag " + dataTag
                + ", from rank " + requesterState.selfIndex() + " " + requesterState.cacheState() + "}";
    }
}
