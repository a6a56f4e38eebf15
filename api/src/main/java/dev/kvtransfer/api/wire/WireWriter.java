package dev.kvtransfer.api.wire;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * Writes the kvtransfer binary format: little-endian, lengths as signed 32-bit counts, strings as UTF-8.
 * A message starts with {@link #MAGIC} and {@link #FORMAT_VERSION} (see {@link #message()}).
 *
 * <p>Not thread-safe; one writer per message. Control messages only: payload bytes never go through here.
 */
public final class WireWriter {
    /** First four bytes of every kvtransfer message ("KVTX" little-endian). */
    public static final int MAGIC = 0x5854564B;
    /** Format version this writer produces. */
    public static final int FORMAT_VERSION = 4;
    /** Oldest format version readers still accept (journals of that version stay readable). */
    public static final int OLDEST_READABLE_VERSION = 1;

    private byte[] bytes;
    private int position;

    private WireWriter(int capacity) {
        bytes = new byte[Math.max(16, capacity)];
    }

    /**
     * A writer that has already written the magic and the format version.
     *
     * @return a new writer
     */
    public static WireWriter message() {
        WireWriter w = new WireWriter(128);
        w.writeInt(MAGIC);
        w.writeShort(FORMAT_VERSION);
        return w;
    }

    /**
     * A writer without a header, for embedding in another framing.
     *
     * @return a new writer
     */
    public static WireWriter raw() {
        return new WireWriter(64);
    }

    private void ensure(long more) {
        if (position + more > bytes.length) {
            long want = Math.max(bytes.length * 2L, position + more);
            if (want > Integer.MAX_VALUE - 16) {
                throw new IllegalArgumentException("message would exceed " + (Integer.MAX_VALUE - 16) + " bytes");
            }
            bytes = Arrays.copyOf(bytes, (int) want);
        }
    }

    /**
     * Writes one byte.
     *
     * @param v the value (low 8 bits)
     * @return this writer
     */
    public WireWriter writeByte(int v) {
        ensure(1);
        bytes[position++] = (byte) v;
        return this;
    }

    /**
     * Writes a boolean as one byte, 0 or 1.
     *
     * @param v the value
     * @return this writer
     */
    public WireWriter writeBoolean(boolean v) {
        return writeByte(v ? 1 : 0);
    }

    /**
     * Writes 16 bits little-endian.
     *
     * @param v the value (low 16 bits)
     * @return this writer
     */
    public WireWriter writeShort(int v) {
        ensure(2);
        bytes[position++] = (byte) v;
        bytes[position++] = (byte) (v >>> 8);
        return this;
    }

    /**
     * Writes 32 bits little-endian.
     *
     * @param v the value
     * @return this writer
     */
    public WireWriter writeInt(int v) {
        ensure(4);
        for (int i = 0; i < 4; i++) {
            bytes[position++] = (byte) (v >>> (8 * i));
        }
        return this;
    }

    /**
     * Writes 64 bits little-endian.
     *
     * @param v the value
     * @return this writer
     */
    public WireWriter writeLong(long v) {
        ensure(8);
        for (int i = 0; i < 8; i++) {
            bytes[position++] = (byte) (v >>> (8 * i));
        }
        return this;
    }

    /**
     * Writes a count-prefixed list of ints.
     *
     * @param values the values
     * @return this writer
     */
    public WireWriter writeIntList(List<Integer> values) {
        writeInt(values.size());
        for (int v : values) {
            writeInt(v);
        }
        return this;
    }

    /**
     * Writes a count-prefixed array of longs.
     *
     * @param values the values
     * @return this writer
     */
    public WireWriter writeLongArray(long[] values) {
        writeInt(values.length);
        for (long v : values) {
            writeLong(v);
        }
        return this;
    }

    /**
     * Writes a count-prefixed array of ints.
     *
     * @param values the values
     * @return this writer
     */
    public WireWriter writeIntArray(int[] values) {
        writeInt(values.length);
        ensure(4L * values.length);
        for (int v : values) {
            writeInt(v);
        }
        return this;
    }

    /**
     * Writes length-prefixed raw bytes.
     *
     * @param b the bytes
     * @return this writer
     */
    public WireWriter writeBytes(byte[] b) {
        writeInt(b.length);
        ensure(b.length);
        System.arraycopy(b, 0, bytes, position, b.length);
        position += b.length;
        return this;
    }

    /**
     * Writes a length-prefixed UTF-8 string.
     *
     * @param s the string
     * @return this writer
     * @throws IllegalArgumentException if the string holds an unpaired surrogate (it has no UTF-8 form)
     */
    public WireWriter writeString(String s) {
        int n = utf8Length(s);
        writeInt(n);
        ensure(n);
        position = putUtf8(s, bytes, position);
        return this;
    }

    /**
     * The length of a string's UTF-8 form, computed without encoding it.
     *
     * @param s the string
     * @return bytes
     * @throws IllegalArgumentException if the string holds an unpaired surrogate (it has no UTF-8 form)
     */
    public static int utf8Length(String s) {
        int n = s.length();
        long bytes = n;
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                continue;
            }
            if (c < 0x800) {
                bytes += 1;
            } else if (Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                bytes += 2; // two chars, four bytes
                i++;
            } else if (Character.isSurrogate(c)) {
                // Strict: String.getBytes would silently turn it into '?', a value the reader then decodes without
                // complaint. Fail at the writer instead.
                throw new IllegalArgumentException("string is not valid UTF-16 (unpaired surrogate at index " + i
                        + ")");
            } else {
                bytes += 2;
            }
        }
        if (bytes > Integer.MAX_VALUE - 16) {
            throw new IllegalArgumentException("string of " + bytes + " UTF-8 bytes");
        }
        return (int) bytes;
    }

    /**
     * Writes a length-prefixed UTF-8 string at an absolute position, the same bytes as {@link #writeString}; the
     * buffer's position, limit and byte order do not matter and are not changed.
     *
     * @param dst the buffer
     * @param at  where the length prefix goes
     * @param s   the string
     * @return the bytes written (4 + {@link #utf8Length})
     * @throws IllegalArgumentException if the string holds an unpaired surrogate
     * @throws IndexOutOfBoundsException when it does not fit
     */
    public static int putString(ByteBuffer dst, int at, String s) {
        int n = utf8Length(s);
        java.util.Objects.checkFromIndexSize(at, 4 + n, dst.limit());
        dst.putInt(at, dst.order() == ByteOrder.LITTLE_ENDIAN ? n : Integer.reverseBytes(n));
        if (n == s.length()) {
            for (int i = 0; i < n; i++) {
                dst.put(at + 4 + i, (byte) s.charAt(i)); // ASCII: one byte a char, no encoder, no array
            }
        } else {
            dst.put(at + 4, s.getBytes(StandardCharsets.UTF_8)); // valid UTF-16 (checked above): exact
        }
        return 4 + n;
    }

    private static int putUtf8(String s, byte[] dst, int at) {
        int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (c >= 0x80) {
                byte[] b = s.getBytes(StandardCharsets.UTF_8); // valid UTF-16 (utf8Length checked it): exact
                System.arraycopy(b, 0, dst, at, b.length);
                return at + b.length;
            }
            dst[at + i] = (byte) c;
        }
        return at + n;
    }

    /**
     * Bytes written so far.
     *
     * @return the size
     */
    public int size() {
        return position;
    }

    /**
     * A copy of the bytes written.
     *
     * @return the message
     */
    public byte[] toByteArray() {
        return Arrays.copyOf(bytes, position);
    }

    /**
     * The bytes written as a little-endian heap buffer positioned at 0.
     *
     * @return a buffer over a copy of the message
     */
    public ByteBuffer toByteBuffer() {
        return ByteBuffer.wrap(toByteArray()).order(ByteOrder.LITTLE_ENDIAN);
    }

    /**
     * A writer for a whole message (magic and version first) whose buffer starts at {@code capacity} bytes: a
     * caller that knows the size never grows the buffer.
     *
     * @param capacity expected size of the whole message
     * @return the writer
     */
    public static WireWriter message(int capacity) {
        WireWriter w = new WireWriter(capacity);
        w.writeInt(MAGIC);
        w.writeShort(FORMAT_VERSION);
        return w;
    }

    /**
     * Writes bytes as they are (no length prefix): an encoding made before by the same writer methods, e.g. a
     * cached {@code TransceiverState}.
     *
     * @param b the bytes
     * @return this writer
     */
    public WireWriter writeRaw(byte[] b) {
        ensure(b.length);
        System.arraycopy(b, 0, bytes, position, b.length);
        position += b.length;
        return this;
    }
}
