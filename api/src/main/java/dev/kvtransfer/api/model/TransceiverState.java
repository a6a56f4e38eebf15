package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.Objects;

/**
 * What one side needs to reach and understand the other: its cache shape and the addresses of its ranks.
 * The address count must equal the cache layout's world size. Equality follows {@link CommState}: it ignores
 * the describing rank's {@code selfIndex}.
 *
 * @param cacheState the instance's cache shape
 * @param commState  the instance's rank addresses and the describing rank's index
 */
public record TransceiverState(CacheState cacheState, CommState commState) {
    private static final int WIRE_TAG = 0x54; // 'T'

    /**
     * Checks for nulls.
     *
     * @param cacheState cache shape
     * @param commState  addresses
     */
    public TransceiverState {
        Objects.requireNonNull(cacheState, "cacheState");
        Objects.requireNonNull(commState, "commState");
        if (commState.size() != cacheState.worldSize()) {
            throw new IllegalArgumentException("commState has " + commState.size() + " addresses but the cache "
                    + "layout has " + cacheState.worldSize() + " ranks");
        }
    }

    /** @return the describing rank's index, or -1 */
    public int selfIndex() {
        return commState.selfIndex();
    }

    /**
     * Encodes this state as a whole message: magic, format version, then {@link #writeTo(WireWriter)}.
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
     * @return the state
     * @throws MalformedMessageException on any bad byte, including trailing bytes
     */
    public static TransceiverState fromBytes(byte[] bytes) {
        Objects.requireNonNull(bytes, "bytes");
        WireReader r = WireReader.message(bytes);
        TransceiverState state = readFrom(r);
        r.expectEnd("TransceiverState");
        return state;
    }

    /**
     * Writes this state.
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        byte[] encoded = StateCodecCache.encoded(this);
        if (encoded == null) {
            // Once per state instance (the control plane sends the same one in every request info).
            WireWriter raw = WireWriter.raw();
            raw.writeByte(WIRE_TAG);
            cacheState.writeTo(raw);
            commState.writeTo(raw);
            encoded = raw.toByteArray();
            StateCodecCache.rememberEncoded(this, encoded);
        }
        w.writeRaw(encoded);
    }

    /**
     * Reads a state written by {@link #writeTo(WireWriter)}.
     *
     * @param r the reader
     * @return the state
     * @throws MalformedMessageException on any bad byte
     */
    public static TransceiverState readFrom(WireReader r) {
        TransceiverState seen = StateCodecCache.decoded(r);
        if (seen != null) {
            return seen; // exactly the bytes decoded (and validated) before
        }
        int start = r.offset();
        int tag = r.readByte("TransceiverState tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected TransceiverState tag " + WIRE_TAG + ", found " + tag);
        }
        CacheState cache = CacheState.readFrom(r);
        CommState comm = CommState.readFrom(r);
        try {
            TransceiverState state = new TransceiverState(cache, comm);
            StateCodecCache.rememberDecoded(r.version(), r.copyRange(start, r.offset()), state);
            return state;
        } catch (IllegalArgumentException e) {
            throw new MalformedMessageException(start, "invalid TransceiverState: " + e.getMessage());
        }
    }
}
