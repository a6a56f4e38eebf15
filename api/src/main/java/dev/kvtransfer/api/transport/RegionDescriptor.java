package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * What a writer needs to write into a registered region: the owner's address, the region's id, its address and
 * length in the owner's memory, and the transport's key (a packed UCX rkey, or a random capability for an
 * emulated transport). Travels in control messages ({@link #writeTo} / {@link #readFrom}).
 *
 * @param owner    the owning manager's {@link ConnectionManager#localAddress()}
 * @param regionId the owner's id of the registration
 * @param address  the region's first byte in the owner's address space
 * @param length   the region's bytes
 * @param key      transport-specific key bytes (at most {@link #MAX_KEY_BYTES})
 */
public record RegionDescriptor(String owner, long regionId, long address, long length, byte[] key) {
    /** Largest key accepted. */
    public static final int MAX_KEY_BYTES = 4096;
    private static final int WIRE_TAG = 0x47; // 'G'

    /**
     * Validates and copies the key.
     *
     * @param owner    owner address
     * @param regionId region id
     * @param address  start address
     * @param length   bytes
     * @param key      key bytes
     */
    public RegionDescriptor {
        Objects.requireNonNull(owner, "owner");
        Objects.requireNonNull(key, "key");
        if (length < 0) {
            throw new IllegalArgumentException("length = " + length + ": must be >= 0");
        }
        if (key.length > MAX_KEY_BYTES) {
            throw new IllegalArgumentException("key of " + key.length + " bytes: at most " + MAX_KEY_BYTES);
        }
        key = key.clone();
    }

    @Override
    public byte[] key() {
        return key.clone();
    }

    /**
     * Whether {@code [offset, offset + bytes)} lies inside the region, computed without overflow.
     *
     * @param offset first byte, relative to the region
     * @param bytes  byte count
     * @return true when inside
     */
    public boolean contains(long offset, long bytes) {
        return offset >= 0 && bytes >= 0 && offset <= length && bytes <= length - offset;
    }

    /**
     * Writes the descriptor (tag first).
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        w.writeByte(WIRE_TAG);
        w.writeString(owner);
        w.writeLong(regionId);
        w.writeLong(address);
        w.writeLong(length);
        w.writeBytes(key);
    }

    /**
     * The length of {@link #writeTo}'s bytes, computed without writing them.
     *
     * @return bytes
     */
    public int wireSize() {
        return 1 + 4 + WireWriter.utf8Length(owner) + 3 * 8 + 4 + key.length;
    }

    /**
     * Writes the same bytes as {@link #writeTo(WireWriter)} at an absolute position in a little-endian buffer (a
     * message written straight into the buffer it is sent from); the buffer's position and limit are not changed.
     *
     * @param dst the buffer, little-endian
     * @param at  where the descriptor starts
     * @return the bytes written ({@link #wireSize()})
     * @throws IndexOutOfBoundsException when it does not fit
     */
    public int writeTo(java.nio.ByteBuffer dst, int at) {
        if (dst.order() != java.nio.ByteOrder.LITTLE_ENDIAN) {
            throw new IllegalArgumentException("the wire format is little-endian; got a " + dst.order() + " buffer");
        }
        int p = at; // every absolute put checks its own index: no second pass over the owner to size it first
        dst.put(p++, (byte) WIRE_TAG);
        p += WireWriter.putString(dst, p, owner);
        dst.putLong(p, regionId);
        dst.putLong(p + 8, address);
        dst.putLong(p + 16, length);
        p += 24;
        dst.putInt(p, key.length);
        dst.put(p + 4, key);
        return p + 4 + key.length - at;
    }

    /**
     * Reads what {@link #writeTo} wrote.
     *
     * @param r the reader
     * @return the descriptor
     * @throws MalformedMessageException on any bad byte
     */
    public static RegionDescriptor readFrom(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("RegionDescriptor tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected RegionDescriptor tag " + WIRE_TAG + ", found " + tag);
        }
        String owner = r.readString("owner");
        long id = r.readLong("regionId");
        long address = r.readLong("address");
        int lengthAt = r.offset();
        long length = r.readLong("length");
        if (length < 0) {
            throw new MalformedMessageException(lengthAt, "length = " + length + ": must be >= 0");
        }
        int keyAt = r.offset();
        byte[] key = r.readBytes("key");
        if (key.length > MAX_KEY_BYTES) {
            throw new MalformedMessageException(keyAt, "key of " + key.length + " bytes: at most " + MAX_KEY_BYTES);
        }
        return new RegionDescriptor(owner, id, address, length, key);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof RegionDescriptor d && regionId == d.regionId && address == d.address
                && length == d.length && owner.equals(d.owner) && Arrays.equals(key, d.key);
    }

    @Override
    public int hashCode() {
        return Objects.hash(owner, regionId, address, length, Arrays.hashCode(key));
    }

    @Override
    public String toString() {
        // The key is a capability: never print it whole.
        String k = key.length == 0 ? "" : HexFormat.of().formatHex(key, 0, Math.min(2, key.length)) + "..";
        return "RegionDescriptor{" + owner + " #" + regionId + " " + length + " B key " + k + "}";
    }
}
