package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.List;
import java.util.Objects;

/**
 * How to reach every rank of one instance: the transport's name and one opaque address per rank (what that
 * rank's {@code ConnectionManager.localAddress()} returned), plus the index of the rank describing itself
 * ({@code -1} when unknown). Equality ignores {@code selfIndex}, as upstream does.
 *
 * @param transport transport provider name, e.g. {@code "aeron"}
 * @param addresses address of rank {@code i} at index {@code i}
 * @param selfIndex the describing rank's index, or {@code -1}
 */
public record CommState(String transport, List<String> addresses, int selfIndex) {
    private static final int WIRE_TAG = 0x4D; // 'M'

    /**
     * Validates and copies.
     *
     * @param transport transport provider name
     * @param addresses address per rank
     * @param selfIndex the describing rank's index, or {@code -1}
     */
    public CommState {
        Objects.requireNonNull(transport, "transport");
        Objects.requireNonNull(addresses, "addresses");
        for (String a : addresses) {
            Objects.requireNonNull(a, "address");
        }
        addresses = List.copyOf(addresses);
        if (selfIndex < -1 || selfIndex >= addresses.size()) {
            throw new IllegalArgumentException("selfIndex = " + selfIndex + ": must be -1 or in [0, "
                    + addresses.size() + ")");
        }
    }

    /**
     * The same instance seen from another rank.
     *
     * @param index the rank index
     * @return a new state
     */
    public CommState withSelfIndex(int index) {
        return new CommState(transport, addresses, index);
    }

    /** @return number of ranks */
    public int size() {
        return addresses.size();
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
    public static CommState fromBytes(byte[] bytes) {
        Objects.requireNonNull(bytes, "bytes");
        WireReader r = WireReader.message(bytes);
        CommState state = readFrom(r);
        r.expectEnd("CommState");
        return state;
    }

    /**
     * Writes this state (tag, transport, addresses, selfIndex).
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        w.writeByte(WIRE_TAG);
        w.writeString(transport);
        w.writeInt(addresses.size());
        for (String a : addresses) {
            w.writeString(a);
        }
        w.writeInt(selfIndex);
    }

    /**
     * Reads a state written by {@link #writeTo(WireWriter)}.
     *
     * @param r the reader
     * @return the state
     * @throws MalformedMessageException on any bad byte
     */
    public static CommState readFrom(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("CommState tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected CommState tag " + WIRE_TAG + ", found " + tag);
        }
        String transport = r.readString("transport");
        int n = r.readCount("addresses", 4);
        String[] addresses = new String[n];
        for (int i = 0; i < n; i++) {
            addresses[i] = r.readString("addresses[" + i + "]");
        }
        int self = r.readInt("selfIndex", -1, Math.max(-1, n - 1));
        return new CommState(transport, List.of(addresses), self);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof CommState c && transport.equals(c.transport) && addresses.equals(c.addresses);
    }

    @Override
    public int hashCode() {
        return 31 * (31 + transport.hashCode()) + addresses.hashCode(); // Objects.hash's value, without its array
    }
}
