package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.util.zip.CRC32C;

/**
 * CRC32C of off-heap payload for the journal: read through {@code ByteBuffer} views of the memory itself
 * (never a {@code byte[]} copy), with one {@link CRC32C} per thread, reused. The JDK's CRC32C uses the CPU's
 * crc32 instructions on direct buffers. Costs one view object per call (per part), only when checksums are on.
 */
public final class Checksums {
    private static final ThreadLocal<CRC32C> CRC = ThreadLocal.withInitial(CRC32C::new);
    private static final long MAX_VIEW = 1L << 30;

    private Checksums() {
    }

    /**
     * @param buffer host memory
     * @param offset first byte
     * @param length bytes
     * @return the CRC32C of {@code buffer[offset, offset + length)}, or {@link TransferJournal#NO_CRC} for device
     *         memory, which the host cannot read
     */
    public static long crc32c(MemoryBuffer buffer, long offset, long length) {
        if (buffer.kind() == MemoryKind.DEVICE) {
            return TransferJournal.NO_CRC;
        }
        java.util.Objects.checkFromIndexSize(offset, length, buffer.size());
        CRC32C crc = CRC.get();
        crc.reset();
        if (length == 0) {
            return crc.getValue();
        }
        if (buffer.size() <= Integer.MAX_VALUE) {
            return crc32c(buffer.asByteBuffer(), (int) offset, (int) length);
        } else {
            for (long pos = 0; pos < length; pos += MAX_VIEW) {
                long n = Math.min(MAX_VIEW, length - pos);
                crc.update(buffer.slice(offset + pos, n).asByteBuffer());
            }
        }
        return crc.getValue();
    }

    /**
     * CRC32C of {@code view[offset, offset + length)}, for a caller that sums many ranges of one buffer through one
     * view (no view object per range). The view's position and limit are changed, and its limit is left at its
     * capacity.
     *
     * @param view   a view of host memory (a direct buffer: the JDK sums it with the CPU's crc32 instructions)
     * @param offset first byte
     * @param length bytes
     * @return the CRC32C
     */
    public static long crc32c(ByteBuffer view, int offset, int length) {
        java.util.Objects.checkFromIndexSize(offset, length, view.capacity());
        CRC32C crc = CRC.get();
        crc.reset();
        view.limit(view.capacity()).position(offset).limit(offset + length);
        crc.update(view);
        view.limit(view.capacity());
        return crc.getValue();
    }
}
