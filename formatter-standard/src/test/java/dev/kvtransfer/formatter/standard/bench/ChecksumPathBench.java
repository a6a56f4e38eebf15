package dev.kvtransfer.formatter.standard.bench;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * What the part checksum costs on each path, modelled on one thread over a 512 MiB pool, measured in GB per
 * CPU-second of the thread (max and median of the passes), so that other processes on a shared machine do not
 * swamp the comparison: a staged receive (the transport's copy into a 2 MiB ring place, then a scatter of 32 KiB
 * pieces at a 64 KiB pitch, TP2 to TP1) without a checksum, with a separate CRC32C pass, and with the CRC32C fused
 * into the scatter at several chunk sizes; a zero-copy send (4 MiB messages) summed after or before the copy; a
 * receive into the blocks summed after. First, CRC32C and CRC32 against memcpy on cache-resident buffers and from
 * memory. Not a test (formatter-standard README, "Part checksums in the copy's pass"). Run:
 * {@code java -XX:MaxDirectMemorySize=2g -cp formatter-standard/target/test-classes
 * dev.kvtransfer.formatter.standard.bench.ChecksumPathBench [passes]}.
 */
public final class ChecksumPathBench {
    static final int POOL = 512 << 20;
    static ByteBuffer src = ByteBuffer.allocateDirect(POOL), dst = ByteBuffer.allocateDirect(POOL),
            staging = ByteBuffer.allocateDirect(4 << 20);
    static final CRC32C crc = new CRC32C();
    static long sink;
    static final java.lang.management.ThreadMXBean CPU = java.lang.management.ManagementFactory.getThreadMXBean();

    static void copy(ByteBuffer s, int so, ByteBuffer d, int dof, int n) {
        ByteBuffer a = s.duplicate(); a.limit(so + n).position(so);
        ByteBuffer b = d.duplicate(); b.position(dof); b.put(a);
    }
    static void sum(ByteBuffer b, int off, int n) {
        ByteBuffer a = b.duplicate(); a.limit(off + n).position(off); crc.update(a);
    }
    /** mode: 0 scatter only, 1 crc then scatter (old), 2 fused chunk c. TP2->TP1: 2 MiB message, 32 KiB pieces at 64 KiB pitch. */
    static void staged(int mode, int c) {
        int msg = 2 << 20, piece = 32 << 10;
        for (int m = 0; m < POOL / 2; m += msg) {
            copy(src, m, staging, 0, msg); // the transport's copy into the ring place
            crc.reset();
            if (mode == 1) sum(staging, 0, msg);
            int pending = 0;
            for (int o = 0; o < msg; o += piece) {
                int d = 2 * m + (o / piece) * 2 * piece; // pitch 64 KiB in the receiver's pool
                copy(staging, o, dst, d, piece);
                if (mode == 2 && o + piece - pending >= c) { sum(staging, pending, o + piece - pending); pending = o + piece; }
            }
            if (mode == 2 && pending < msg) sum(staging, pending, msg - pending);
            sink += crc.getValue();
        }
    }
    /** mode: 0 copy only, 1 copy then crc source (sum after), 2 crc source then copy (sum first). 4 MiB messages. */
    static void direct(int mode) {
        int msg = 4 << 20;
        for (int m = 0; m < POOL; m += msg) {
            crc.reset();
            if (mode == 2) sum(src, m, msg);
            copy(src, m, dst, m, msg);
            if (mode == 1) sum(src, m, msg);
            sink += crc.getValue();
        }
    }
    /** receiver side of a direct part: copy into the pool, then crc the destination. */
    static void directRecv(int mode) {
        int msg = 4 << 20;
        for (int m = 0; m < POOL; m += msg) {
            crc.reset();
            copy(src, m, dst, m, msg);
            if (mode == 1) sum(dst, m, msg);
            sink += crc.getValue();
        }
    }
    interface Run { void run(); }
    static String time(String name, Run r, int passes, long bytes) {
        double[] g = new double[passes];
        for (int i = 0; i < passes; i++) {
            long t0 = CPU.getCurrentThreadCpuTime(); r.run(); g[i] = bytes / (double) (CPU.getCurrentThreadCpuTime() - t0);
        }
        Arrays.sort(g);
        return String.format("%-44s max %.2f / median %.2f GB per CPU-second", name, g[passes - 1], g[passes / 2]);
    }
    /** CRC32C, CRC32 and memcpy over a cache-resident buffer, and CRC32C / memcpy of the whole pool (wall time). */
    static void raw() {
        for (int s : new int[] {32 << 10, 64 << 10, 1 << 20}) {
            long reps = (4L << 30) / s;
            java.util.zip.CRC32 c32 = new java.util.zip.CRC32();
            long t0 = System.nanoTime();
            for (long r = 0; r < reps; r++) {
                crc.reset();
                sum(src, 0, s);
            }
            long t1 = System.nanoTime();
            for (long r = 0; r < reps; r++) {
                c32.reset();
                ByteBuffer v = src.duplicate();
                v.limit(s).position(0);
                c32.update(v);
            }
            long t2 = System.nanoTime();
            for (long r = 0; r < reps; r++) {
                copy(src, 0, dst, 0, s);
            }
            long t3 = System.nanoTime();
            System.out.printf("cache-resident %4d KiB: CRC32C %.1f GB/s, CRC32 %.1f GB/s, memcpy %.1f GB/s%n", s >> 10,
                    reps * s / (double) (t1 - t0), reps * s / (double) (t2 - t1), reps * s / (double) (t3 - t2));
        }
        long t0 = System.nanoTime();
        copy(src, 0, dst, 0, POOL);
        long t1 = System.nanoTime();
        crc.reset();
        sum(dst, 0, POOL);
        long t2 = System.nanoTime();
        System.out.printf("512 MiB from memory: memcpy %.1f GB/s, CRC32C %.1f GB/s%n", POOL / (double) (t1 - t0),
                POOL / (double) (t2 - t1));
    }

    public static void main(String[] a) {
        for (int i = 0; i < POOL; i += 4096) {
            src.put(i, (byte) i);
            dst.put(i, (byte) 1);
        }
        int passes = Integer.parseInt(a.length > 0 ? a[0] : "7");
        raw();
        for (int round = 0; round < 2; round++) {
            System.out.println("round " + round + " load " + load());
            System.out.println(time("staged: scatter only (no checksum)", () -> staged(0, 0), passes, POOL / 2));
            System.out.println(time("staged: crc pass, then scatter (before)", () -> staged(1, 0), passes, POOL / 2));
            for (int c : new int[] {32 << 10, 64 << 10, 128 << 10, 256 << 10, 2 << 20})
                System.out.println(time("staged: fused scatter+crc, chunk " + (c >> 10) + " KiB", () -> staged(2, c), passes, POOL / 2));
            System.out.println(time("direct send: copy only", () -> direct(0), passes, POOL));
            System.out.println(time("direct send: copy, then crc (sum after)", () -> direct(1), passes, POOL));
            System.out.println(time("direct send: crc, then copy (sum first)", () -> direct(2), passes, POOL));
            System.out.println(time("direct recv: copy only", () -> directRecv(0), passes, POOL));
            System.out.println(time("direct recv: copy, then crc of destination", () -> directRecv(1), passes, POOL));
        }
        System.out.println(sink);
    }
    static String load() { try { return new String(java.nio.file.Files.readAllBytes(java.nio.file.Path.of("/proc/loadavg"))).trim(); } catch (Exception e) { return "?"; } }
}
