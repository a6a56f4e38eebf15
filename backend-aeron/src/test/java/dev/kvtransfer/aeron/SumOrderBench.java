package dev.kvtransfer.aeron;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * Which order of copy and CRC32C a one-copy writer should use ({@code ShmWriter}), measured without the transport:
 * 128 KiB chunks between two {@code /dev/shm} mappings; a plain copy against sum-the-source-then-copy,
 * copy-then-sum-what-landed (what {@code ShmWriter} does) and copy-then-sum-the-source-in-a-second-pass (what the
 * session did before). Prints GB/s of rounds 2 to 7, min / median / max. Not a test.
 *
 * <p>{@code java -cp backend-aeron/target/test-classes dev.kvtransfer.aeron.SumOrderBench [MiB]}
 */
public final class SumOrderBench {
    private static final int CHUNK = 128 << 10;
    private static final String[] WAYS = {"copy", "sum source, then copy", "copy, then sum what landed",
        "copy all, then sum the source"};

    private SumOrderBench() {
    }

    /**
     * Runs it.
     *
     * @param args {@code [MiB]} (default 128)
     * @throws Exception when a file cannot be mapped
     */
    public static void main(String[] args) throws Exception {
        int size = (args.length > 0 ? Integer.parseInt(args[0]) : 128) << 20;
        File a = new File("/dev/shm/kvtransfer-sum-order-src-" + ProcessHandle.current().pid());
        File b = new File("/dev/shm/kvtransfer-sum-order-dst-" + ProcessHandle.current().pid());
        try (RandomAccessFile fa = new RandomAccessFile(a, "rw"); RandomAccessFile fb = new RandomAccessFile(b, "rw")) {
            fa.setLength(size);
            fb.setLength(size);
            MappedByteBuffer src = fa.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, size);
            MappedByteBuffer dst = fb.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, size);
            for (int i = 0; i < size; i += 8) {
                src.putLong(i, i * 0x9E3779B97F4A7C15L);
                dst.putLong(i, 1);
            }
            int rounds = 7;
            double[][] gbs = new double[WAYS.length][rounds];
            CRC32C crc = new CRC32C();
            for (int round = 0; round < rounds; round++) {
                for (int way = 0; way < WAYS.length; way++) {
                    long t0 = System.nanoTime();
                    run(way, src, dst, size, crc);
                    gbs[way][round] = size / ((System.nanoTime() - t0) / 1e9) / 1e9;
                }
            }
            for (int way = 0; way < WAYS.length; way++) {
                double[] x = Arrays.copyOfRange(gbs[way], 1, rounds);
                Arrays.sort(x);
                System.out.printf("%-32s GB/s %.2f / %.2f / %.2f%n", WAYS[way], x[0], x[x.length / 2],
                        x[x.length - 1]);
            }
        } finally {
            a.delete();
            b.delete();
        }
    }

    private static void run(int way, ByteBuffer src, ByteBuffer dst, int size, CRC32C crc) {
        crc.reset();
        if (way == 3) {
            dst.duplicate().put(src.duplicate());
            crc.update(src.duplicate());
            return;
        }
        for (int c = 0; c < size; c += CHUNK) {
            ByteBuffer s = src.duplicate();
            s.limit(c + CHUNK).position(c);
            ByteBuffer d = dst.duplicate();
            d.position(c);
            if (way == 1) {
                crc.update(s.duplicate());
            }
            d.put(s);
            if (way == 2) {
                ByteBuffer landed = dst.duplicate();
                landed.limit(c + CHUNK).position(c);
                crc.update(landed);
            }
        }
    }
}
