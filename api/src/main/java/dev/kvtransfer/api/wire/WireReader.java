package dev.kvtransfer.api.wire;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Reads the kvtransfer binary format written by {@link WireWriter}. Every read checks that the bytes are
 * there and every count is checked against {@link #MAX_COUNT} and against the bytes actually left, so a
 * hostile message fails with {@link MalformedMessageException} (what and where) and never allocates more than
 * the message itself could describe.
 *
 * <p>Not thread-safe; one reader per message.
 */
public final class WireReader {
    private static final byte[] NO_BYTES = new byte[0];
    private static final int[] NO_INTS = new int[0];
    private static final long[] NO_LONGS = new long[0];

    /** Upper bound on any list length or string length in a control message. */
    public static final int MAX_COUNT = 1 << 20;

    private final ByteBuffer buffer;
    private final int start;
    private int version = WireWriter.FORMAT_VERSION;

    private WireReader(ByteBuffer buffer) {
        this.buffer = buffer.slice().order(ByteOrder.LITTLE_ENDIAN);
        this.start = 0;
    }

    /**
     * A reader over a message that starts with the magic and format version; both are checked.
     *
     * @param bytes the message
     * @return a reader positioned after the header
     * @throws MalformedMessageException if the header is wrong or the version is newer than this reader
     */
    public static WireReader message(byte[] bytes) {
        return message(ByteBuffer.wrap(bytes));
    }

    /**
     * A reader over a message (from the buffer's position to its limit) that starts with the header.
     *
     * @param bytes the message; its position is not changed
     * @return a reader positioned after the header
     * @throws MalformedMessageException if the header is wrong or the version is newer than this reader
     */
    public static WireReader message(ByteBuffer bytes) {
        WireReader r = new WireReader(bytes);
        int magic = r.readInt("magic");
        if (magic != WireWriter.MAGIC) {
            throw new MalformedMessageException(0, String.format(
                    "bad magic 0x%08x, expected 0x%08x: not a kvtransfer message", magic, WireWriter.MAGIC));
        }
        int version = r.readShort("format version");
        if (version > WireWriter.FORMAT_VERSION) {
            throw new MalformedMessageException(4, "format version " + version + " is newer than version "
                    + WireWriter.FORMAT_VERSION + ", the newest this reader understands");
        }
        if (version < WireWriter.OLDEST_READABLE_VERSION) {
            throw new MalformedMessageException(4, "unsupported format version " + version
                    + ", this reader understands versions " + WireWriter.OLDEST_READABLE_VERSION + " to "
                    + WireWriter.FORMAT_VERSION);
        }
        r.version = version;
        return r;
    }

    /**
     * The format version of the message being read: fields added in later versions are read only when it is
     * at least their version. A reader without a header reads the current version.
     *
     * @return the version
     */
    public int version() {
        return version;
    }

    /**
     * A reader without a header.
     *
     * @param bytes the bytes
     * @return a reader at offset 0
     */
    public static WireReader raw(byte[] bytes) {
        return new WireReader(ByteBuffer.wrap(bytes));
    }

    /**
     * Current offset from the start of the message.
     *
     * @return the offset
     */
    public int offset() {
        return buffer.position() - start;
    }

    /**
     * Bytes left to read.
     *
     * @return the count
     */
    public int remaining() {
        return buffer.remaining();
    }

    private void need(int n, String what) {
        if (buffer.remaining() < n) {
            throw new MalformedMessageException(offset(), "truncated: " + what + " needs " + n
                    + " bytes, " + buffer.remaining() + " left");
        }
    }

    /**
     * Fails unless the whole message has been read.
     *
     * @param what the message being decoded, for the error text
     */
    public void expectEnd(String what) {
        if (buffer.hasRemaining()) {
            throw new MalformedMessageException(offset(), buffer.remaining() + " trailing bytes after " + what);
        }
    }

    /**
     * Reads one unsigned byte.
     *
     * @param what field name for errors
     * @return 0..255
     */
    public int readByte(String what) {
        need(1, what);
        return buffer.get() & 0xFF;
    }

    /**
     * Reads a boolean that must be 0 or 1.
     *
     * @param what field name for errors
     * @return the value
     */
    public boolean readBoolean(String what) {
        int at = offset();
        int b = readByte(what);
        if (b > 1) {
            throw new MalformedMessageException(at, what + ": boolean byte must be 0 or 1, was " + b);
        }
        return b == 1;
    }

    /**
     * Reads an unsigned 16-bit value.
     *
     * @param what field name for errors
     * @return 0..65535
     */
    public int readShort(String what) {
        need(2, what);
        return buffer.getShort() & 0xFFFF;
    }

    /**
     * Reads a 32-bit value.
     *
     * @param what field name for errors
     * @return the value
     */
    public int readInt(String what) {
        need(4, what);
        return buffer.getInt();
    }

    /**
     * Reads a 32-bit value that must lie in {@code [min, max]}.
     *
     * @param what field name for errors
     * @param min  smallest allowed
     * @param max  largest allowed
     * @return the value
     */
    public int readInt(String what, int min, int max) {
        int at = offset();
        int v = readInt(what);
        if (v < min || v > max) {
            throw new MalformedMessageException(at, what + " = " + v + " out of range [" + min + ", " + max + "]");
        }
        return v;
    }

    /**
     * Reads a 64-bit value.
     *
     * @param what field name for errors
     * @return the value
     */
    public long readLong(String what) {
        need(8, what);
        return buffer.getLong();
    }

    /**
     * Reads a count and checks it against {@link #MAX_COUNT} and the bytes left.
     *
     * @param what        field name for errors
     * @param elementSize minimum encoded size of one element
     * @return the count
     */
    public int readCount(String what, int elementSize) {
        int at = offset();
        if (buffer.remaining() < 4) { // the label is built only for the error: a count is read per field
            throw new MalformedMessageException(at, "truncated: " + what + " count needs 4 bytes, "
                    + buffer.remaining() + " left");
        }
        int n = buffer.getInt();
        if (n < 0 || n > MAX_COUNT) {
            throw new MalformedMessageException(at, what + " count " + n + " out of range [0, " + MAX_COUNT + "]");
        }
        if ((long) n * Math.max(1, elementSize) > buffer.remaining()) {
            throw new MalformedMessageException(at, what + " count " + n + " needs at least "
                    + ((long) n * Math.max(1, elementSize)) + " bytes, " + buffer.remaining() + " left");
        }
        return n;
    }

    /** {@code readInt(what + "[" + i + "]", min, max)}, the label built only when it fails. */
    private int readElement(String what, int i, int min, int max) {
        int at = offset();
        if (buffer.remaining() < 4) {
            throw new MalformedMessageException(at, "truncated: " + what + "[" + i + "] needs 4 bytes, "
                    + buffer.remaining() + " left");
        }
        int v = buffer.getInt();
        if (v < min || v > max) {
            throw new MalformedMessageException(at, what + "[" + i + "] = " + v + " out of range [" + min + ", "
                    + max + "]");
        }
        return v;
    }

    /**
     * Reads a count-prefixed list of ints, each in {@code [min, max]}.
     *
     * @param what field name for errors
     * @param min  smallest allowed element
     * @param max  largest allowed element
     * @return an unmodifiable list
     */
    public List<Integer> readIntList(String what, int min, int max) {
        int n = readCount(what, 4);
        List<Integer> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(readElement(what, i, min, max));
        }
        return Collections.unmodifiableList(out);
    }

    /**
     * Reads a count-prefixed array of ints, each in {@code [min, max]}.
     *
     * @param what field name for errors
     * @param min  smallest allowed element
     * @param max  largest allowed element
     * @return the values
     */
    public int[] readIntArray(String what, int min, int max) {
        int n = readCount(what, 4);
        if (n == 0) {
            return NO_INTS;
        }
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            out[i] = readElement(what, i, min, max);
        }
        return out;
    }

    /**
     * Reads length-prefixed raw bytes.
     *
     * @param what field name for errors
     * @return the bytes
     */
    public byte[] readBytes(String what) {
        int n = readCount(what, 1);
        if (n == 0) {
            return NO_BYTES; // an empty array cannot change: one instance for every empty field
        }
        byte[] out = new byte[n];
        buffer.get(out);
        return out;
    }

    /**
     * Reads a count-prefixed array of longs.
     *
     * @param what field name for errors
     * @return the values
     */
    public long[] readLongArray(String what) {
        int n = readCount(what, 8);
        if (n == 0) {
            return NO_LONGS;
        }
        long[] out = new long[n];
        for (int i = 0; i < n; i++) {
            out[i] = readLong(what);
        }
        return out;
    }

    /**
     * Reads a length-prefixed UTF-8 string; invalid UTF-8 is malformed.
     *
     * @param what field name for errors
     * @return the string
     */
    public String readString(String what) {
        int n = readCount(what, 1);
        int at = offset();
        int p = buffer.position();
        boolean ascii = true;
        for (int i = 0; i < n && ascii; i++) {
            ascii = buffer.get(p + i) >= 0;
        }
        if (ascii) {
            // The usual case (addresses, names): one array and the string, no decoder.
            byte[] b = new byte[n];
            buffer.get(p, b);
            buffer.position(p + n);
            return new String(b, StandardCharsets.US_ASCII);
        }
        ByteBuffer slice = buffer.slice().limit(n);
        buffer.position(p + n);
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(slice).toString();
        } catch (CharacterCodingException e) {
            throw new MalformedMessageException(at, what + ": invalid UTF-8");
        }
    }

    /**
     * Consumes the next bytes if they equal {@code expected} exactly; allocates nothing. Lets a decoder reuse what
     * it decoded from the same bytes before (e.g. a peer's {@code TransceiverState}, identical in every request).
     *
     * @param expected the bytes
     * @return true (and the bytes consumed) when they match; false (nothing consumed) otherwise
     */
    public boolean skipIfNext(byte[] expected) {
        int n = expected.length;
        if (buffer.remaining() < n) {
            return false;
        }
        int at = buffer.position();
        if (buffer.hasArray()) {
            int base = buffer.arrayOffset() + at;
            if (!java.util.Arrays.equals(buffer.array(), base, base + n, expected, 0, n)) {
                return false;
            }
        } else {
            for (int i = 0; i < n; i++) {
                if (buffer.get(at + i) != expected[i]) {
                    return false;
                }
            }
        }
        buffer.position(at + n);
        return true;
    }

    /**
     * Whether the 8 bytes {@code ahead} bytes past the current position hold {@code value} little-endian; false
     * when they lie beyond the end. Consumes and allocates nothing (a cheap test before {@link #skipIfNext}).
     *
     * @param ahead bytes past the current position, {@code >= 0}
     * @param value the expected value
     * @return whether they match
     */
    public boolean longAhead(int ahead, long value) {
        return ahead >= 0 && ahead <= buffer.remaining() - 8 && buffer.getLong(buffer.position() + ahead) == value;
    }

    /**
     * A copy of the bytes between two offsets already read ({@link #offset()} values), e.g. what one
     * {@code readFrom} consumed.
     *
     * @param from first offset
     * @param to   end offset (exclusive), at most {@link #offset()}
     * @return the bytes
     */
    public byte[] copyRange(int from, int to) {
        if (from < 0 || to < from || to > offset()) {
            throw new IndexOutOfBoundsException("range [" + from + ", " + to + ") of the " + offset()
                    + " bytes read");
        }
        byte[] out = new byte[to - from];
        buffer.get(start + from, out);
        return out;
    }
}
