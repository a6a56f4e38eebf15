package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.nio.ByteBuffer;
import java.util.Objects;
import java.util.zip.CRC32C;

/**
 * The CRC32C of one message in a host buffer, computed chunk by chunk right behind the copy that places (scatter
 * source, gather destination) its bytes, so each chunk is summed while it is still in the cache instead of in a
 * second pass over the whole message. The sum is the plain CRC32C of the message's bytes in order (the JDK's
 * {@code CRC32C.update} over consecutive pieces), so a peer that checksums in a separate pass gets the same value.
 *
 * <p>Use: {@link #begin} a message, tell {@link #placed} each time the bytes up to an offset are in their final
 * order (a slice copied), {@link #finish} for the value. Bytes are read through a {@code ByteBuffer} view of the
 * memory itself, never a {@code byte[]} copy; the view is kept while messages come from the same buffer, so a part
 * costs no allocation per message. Not thread-safe: one per thread. Host memory only: a copy that may still be in
 * flight (a device manager's asynchronous copy) must not be summed this way.
 *
 * @deprecated moved to {@code dev.kvtransfer.formatter.support.ChunkCrc}
 *             (kvtransfer-formatter-support), which every kvtransfer module uses now; this frozen copy stays for
 *             plugins built against an older api until 0.4 (see the api README).
 */
@Deprecated(since = "0.3", forRemoval = true)
public final class ChunkCrc {
    /**
     * Bytes summed at once (the last chunk of a message may be shorter, and a slice larger than a chunk is summed
     * after its copy as one piece). 128 KiB: the chunk is still in the core's L2 when it is summed, and large
     * enough that the per-call cost of {@code CRC32C.update} vanishes; formatter-standard's README has the sweep
     * (32 KiB to 2 MiB).
     */
    public static final long DEFAULT_CHUNK_BYTES = 128L << 10;

    private final CRC32C crc = new CRC32C();
    private final long chunkBytes;
    private MemoryBuffer viewOf;
    private ByteBuffer view;
    /** Buffer offset of {@code view}'s byte 0. */
    private long viewBase;
    private long done;
    private long end;

    /** A summer with {@link #DEFAULT_CHUNK_BYTES}. */
    public ChunkCrc() {
        this(DEFAULT_CHUNK_BYTES);
    }

    /**
     * @param chunkBytes bytes summed at once, at least 1
     */
    public ChunkCrc(long chunkBytes) {
        if (chunkBytes < 1) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ": must be at least 1");
        }
        this.chunkBytes = chunkBytes;
    }

    /**
     * Starts a message: {@code buffer[offset, offset + length)}.
     *
     * @param buffer host memory holding the message
     * @param offset its first byte
     * @param length its bytes
     * @return this
     */
    public ChunkCrc begin(MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.checkFromIndexSize(offset, length, buffer.size());
        crc.reset();
        done = offset;
        end = offset + length;
        if (buffer != viewOf || offset < viewBase || end - viewBase > view.capacity()) {
            if (buffer.size() <= Integer.MAX_VALUE) {
                view = buffer.asByteBuffer();
                viewBase = 0;
            } else {
                view = buffer.slice(offset, length).asByteBuffer(); // a view of at most 2 GiB, per message
                viewBase = offset;
            }
            viewOf = buffer;
        }
        return this;
    }

    /**
     * The message's bytes up to {@code upTo} (a buffer offset) are placed: sums every full chunk of them not
     * summed yet (all of them once {@code upTo} is the message's end).
     *
     * @param upTo buffer offset, non-decreasing from call to call
     */
    public void placed(long upTo) {
        if (upTo < done || upTo > end) {
            throw new IllegalArgumentException("placed up to " + upTo + ": outside [" + done + ", " + end + "]");
        }
        if (upTo - done >= chunkBytes || upTo == end) {
            sum(upTo);
        }
    }

    /** @return the CRC32C of the whole message, summing what is left (its bytes must all be placed by now) */
    public int finish() {
        sum(end);
        return (int) crc.getValue();
    }

    /**
     * Copies {@code length} contiguous bytes chunk by chunk and sums each chunk of {@code summed} (the copy's
     * source or destination, the buffer of the current message) right after its copy.
     *
     * @param bm        the copies' manager (synchronous copies: host memory)
     * @param src       source
     * @param srcOffset first source byte
     * @param dst       destination
     * @param dstOffset first destination byte
     * @param length    bytes
     * @param summedIsSource true to sum the source range, false the destination range
     */
    public void copy(BufferManager bm, MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset,
                     long length, boolean summedIsSource) {
        for (long pos = 0; pos < length; ) {
            long n = Math.min(chunkBytes, length - pos);
            bm.copy(src, srcOffset + pos, dst, dstOffset + pos, n);
            pos += n;
            placed((summedIsSource ? srcOffset : dstOffset) + pos);
        }
    }

    private void sum(long upTo) {
        if (upTo > done) {
            int from = (int) (done - viewBase);
            view.limit(from + (int) (upTo - done)).position(from);
            crc.update(view);
            done = upTo;
        }
    }
}
