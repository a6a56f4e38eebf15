package dev.kvtransfer.cli;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;

/**
 * The ceiling the demo compares itself with: a plain single-thread bulk copy (the {@link HostBufferManager}
 * copy, i.e. {@code Unsafe.copyMemory}) of the same number of bytes, between two off-heap buffers of one
 * request's size (at most 1 GiB), in this JVM.
 */
final class CopyBaseline {
    private CopyBaseline() {
    }

    static double gigabytesPerSecond(long totalBytes, long requestBytes) {
        long size = Math.max(1L << 20, Math.min(requestBytes, 1L << 30));
        try (HostBufferManager mm = new HostBufferManager()) {
            MemoryBuffer src = mm.allocate(size, MemoryKind.HOST);
            MemoryBuffer dst = mm.allocate(size, MemoryKind.HOST);
            try {
                mm.copy(src, 0, dst, 0, size); // touch both so page faults are not timed
                long copied = 0;
                long start = System.nanoTime();
                while (copied < totalBytes) {
                    long n = Math.min(size, totalBytes - copied);
                    mm.copy(src, 0, dst, 0, n);
                    copied += n;
                }
                long nanos = Math.max(1, System.nanoTime() - start);
                return copied / (nanos / 1e9) / 1e9;
            } finally {
                src.close();
                dst.close();
            }
        }
    }
}
