package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Measures copy rates through a {@link CudaBufferManager}: device to device, host to device and device to host
 * (pinned and pageable host memory), and a strided {@code copy2d} shaped like a KV head-range gather. Run by
 * {@code scripts/gpu-check.sh}:
 *
 * <pre>
 *   java -cp ... dev.kvtransfer.memory.cuda.CudaCopyRates [--device N] [--mib M] [--iterations K]
 * </pre>
 *
 * <p>Each rate is bytes copied once per iteration (a device-to-device copy reads and writes them, so it moves twice
 * that through device memory) divided by the wall time of {@code K} copies and one {@code synchronize()}, after
 * one untimed warm-up round. Prints one {@code copy-rate} line per direction; exits 2 when CUDA is unavailable,
 * 1 on any other failure.
 */
public final class CudaCopyRates {
    private CudaCopyRates() {
    }

    /** One measured direction. */
    public static final class Rate {
        private final String name;
        private final long bytes;
        private final int iterations;
        private final long nanos;

        Rate(String name, long bytes, int iterations, long nanos) {
            this.name = name;
            this.bytes = bytes;
            this.iterations = iterations;
            this.nanos = nanos;
        }

        /** @return e.g. {@code "D2D"} */
        public String name() {
            return name;
        }

        /** @return decimal gigabytes per second */
        public double gigabytesPerSecond() {
            return (double) bytes * iterations / nanos;
        }

        @Override
        public String toString() {
            return String.format(Locale.ROOT, "copy-rate %-18s %6.1f GB/s  (%d MiB x %d in %.1f ms)", name,
                    gigabytesPerSecond(), bytes >> 20, iterations, nanos / 1e6);
        }
    }

    /**
     * Measures every direction.
     *
     * @param manager    the manager to copy with
     * @param bytes      bytes per copy (a multiple of 64 KiB)
     * @param iterations timed copies per direction
     * @return the rates, in a fixed order: D2D, H2D pinned, D2H pinned, H2D pageable, D2H pageable, D2D copy2d
     */
    public static List<Rate> measure(CudaBufferManager manager, long bytes, int iterations) {
        Objects.requireNonNull(manager, "manager");
        if (bytes <= 0 || bytes % 65536 != 0 || iterations <= 0) {
            throw new IllegalArgumentException("bytes = " + bytes + " (positive multiple of 64 KiB), iterations = "
                    + iterations + " (positive)");
        }
        List<Rate> rates = new ArrayList<>();
        // The pageable buffer closes last: the manager's buffers wait for the stream before they are freed.
        try (PageableBuffer pageable = new PageableBuffer(bytes);
             MemoryBuffer d1 = manager.allocate(bytes, MemoryKind.DEVICE);
             MemoryBuffer d2 = manager.allocate(bytes, MemoryKind.DEVICE);
             MemoryBuffer pinned = manager.allocate(bytes, MemoryKind.PINNED_HOST)) {
            // Touch the host pages first, so page faults stay out of the numbers.
            pageable.touch();
            rates.add(time(manager, "D2D", d1, d2, bytes, iterations));
            rates.add(time(manager, "H2D pinned", pinned, d1, bytes, iterations));
            rates.add(time(manager, "D2H pinned", d1, pinned, bytes, iterations));
            rates.add(time(manager, "H2D pageable", pageable, d1, bytes, iterations));
            rates.add(time(manager, "D2H pageable", d1, pageable, bytes, iterations));
            // A KV-style gather: half of every 64 KiB row (a head range of each [layer][kv] run).
            long pitch = 65536;
            long rows = bytes / pitch;
            Runnable gather = () -> manager.copy2d(d1, 0, pitch, d2, 0, pitch / 2, pitch / 2, rows);
            gather.run();
            manager.synchronize();
            long t0 = System.nanoTime();
            for (int i = 0; i < iterations; i++) {
                gather.run();
            }
            manager.synchronize();
            rates.add(new Rate("D2D copy2d 32K/64K", bytes / 2, iterations, System.nanoTime() - t0));
        }
        return rates;
    }

    private static Rate time(CudaBufferManager m, String name, MemoryBuffer src, MemoryBuffer dst, long bytes,
                             int iterations) {
        m.copy(src, 0, dst, 0, bytes);
        m.synchronize();
        long t0 = System.nanoTime();
        for (int i = 0; i < iterations; i++) {
            m.copy(src, 0, dst, 0, bytes);
        }
        m.synchronize();
        return new Rate(name, bytes, iterations, System.nanoTime() - t0);
    }

    /**
     * Prints the rates.
     *
     * @param args {@code --device N} (default 0), {@code --mib M} (default 256), {@code --iterations K} (default 20)
     */
    public static void main(String[] args) {
        int device = 0;
        long mib = 256;
        int iterations = 20;
        try {
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("missing value after " + a);
                }
                String v = args[++i];
                switch (a) {
                    case "--device":
                        device = Integer.parseInt(v);
                        break;
                    case "--mib":
                        mib = Long.parseLong(v);
                        break;
                    case "--iterations":
                        iterations = Integer.parseInt(v);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown option " + a
                                + "; known: --device, --mib, --iterations");
                }
            }
        } catch (IllegalArgumentException e) {
            System.err.println("CudaCopyRates: " + e.getMessage());
            System.exit(1);
            return;
        }
        CudaMemoryProvider provider = new CudaMemoryProvider();
        if (!provider.isAvailable()) {
            System.err.println("CudaCopyRates: CUDA unavailable: " + provider.unavailabilityCause());
            System.exit(2);
            return;
        }
        try (CudaBufferManager m = new CudaBufferManager(device, Duration.ofSeconds(60), false)) {
            System.out.println("copy-rate device: " + m.describeDevice());
            for (Rate r : measure(m, mib << 20, iterations)) {
                System.out.println(r);
            }
        } catch (RuntimeException e) {
            System.err.println("CudaCopyRates failed: " + e);
            e.printStackTrace();
            System.exit(1);
        }
    }

    /** Ordinary (pageable) host memory, as another manager would hand it over. */
    private static final class PageableBuffer implements MemoryBuffer {
        private final long raw;
        private final long address;
        private final long size;
        private final AtomicBoolean open = new AtomicBoolean(true);

        PageableBuffer(long size) {
            this.size = size;
            this.raw = HostMemory.allocateForAlignment(size);
            this.address = HostMemory.align(raw);
        }

        void touch() {
            for (long off = 0; off < size; off += Integer.MAX_VALUE) {
                ByteBuffer b = HostMemory.byteBuffer(address + off, (int) Math.min(Integer.MAX_VALUE, size - off));
                for (int p = 0; p < b.capacity(); p += (int) HostMemory.PAGE) {
                    b.put(p, (byte) 1);
                }
            }
        }

        @Override
        public long address() {
            return address;
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return MemoryKind.HOST;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            throw new UnsupportedOperationException("not needed for the measurement");
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("not needed for the measurement");
        }

        @Override
        public void close() {
            if (open.compareAndSet(true, false)) {
                HostMemory.free(raw);
            }
        }
    }
}
