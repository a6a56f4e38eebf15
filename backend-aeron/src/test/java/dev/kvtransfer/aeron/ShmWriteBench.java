package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Set;

/**
 * The one-copy write alone, without the transceiver: two managers of this JVM, a fresh grant per round over a
 * shared pool file, one batch of 4 MiB entries written through {@code ShmWriter} (the grant's hand-out round trip
 * included), next to a single-thread memcpy of the same bytes between private buffers in the same loop. Prints the
 * median of rounds 2 to 6 of each (round 1 maps and faults in).
 *
 * <p>{@code java -cp backend-aeron/target/test-classes:backend-aeron/target/classes:$(cat /tmp/aeron-cp.txt)
 * --add-exports java.base/jdk.internal.misc=ALL-UNNAMED dev.kvtransfer.aeron.ShmWriteBench [MiB]}, the class path
 * from {@code mvn -o -q -pl backend-aeron -am test-compile dependency:build-classpath
 * -Dmdep.outputFile=/tmp/aeron-cp.txt -Dmdep.includeScope=test}.
 */
public final class ShmWriteBench {
    private ShmWriteBench() {
    }

    /**
     * Runs it.
     *
     * @param args {@code [MiB]} (default 128)
     */
    public static void main(String[] args) {
        long size = (args.length > 0 ? Long.parseLong(args[0]) : 128) << 20;
        byte[] secret = "kvtransfer-shm-write-bench-secret-0123".getBytes(StandardCharsets.UTF_8);
        Duration t = Duration.ofSeconds(30);
        int rounds = 6;
        double[] shm = new double[rounds];
        double[] memcpy = new double[rounds];
        try (HostBufferManager pools = new HostBufferManager(false, true);
             AeronConnectionManager owner = (AeronConnectionManager) new AeronTransportProvider().create(
                     TransportConfig.builder().name("owner").authSecret(secret).defaultTimeout(t).build());
             AeronConnectionManager writer = (AeronConnectionManager) new AeronTransportProvider().create(
                     TransportConfig.builder().name("writer").authSecret(secret).defaultTimeout(t).build())) {
            MemoryBuffer pool = pools.allocatePool(size, MemoryKind.HOST);
            MemoryBuffer src = pools.allocate(size, MemoryKind.HOST);
            MemoryBuffer dst = pools.allocate(size, MemoryKind.HOST);
            TestPattern.fill(src, 0, size, 1);
            TestPattern.fill(dst, 0, size, 2);
            Connection c = writer.connection(owner.localAddress());
            WriteBatch b = new WriteBatch();
            for (int round = 0; round < rounds; round++) {
                RegisteredRegion r = owner.register(pool, Set.of(writer.localAddress()));
                b.clear();
                for (long off = 0; off < size; off += 4 << 20) {
                    b.add(src, off, r.descriptor(), off, Math.min(4 << 20, size - off));
                }
                long t0 = System.nanoTime();
                c.write(b, t);
                long t1 = System.nanoTime();
                pools.copy(src, 0, dst, 0, size);
                long t2 = System.nanoTime();
                r.close();
                shm[round] = size / (double) (t1 - t0);
                memcpy[round] = size / (double) (t2 - t1);
            }
            TestPattern.assertPattern(pool, 0, size, 1);
            TestPattern.assertPattern(dst, 0, size, 1);
            pool.close();
            src.close();
            dst.close();
        }
        double s = median(Arrays.copyOfRange(shm, 1, rounds));
        double m = median(Arrays.copyOfRange(memcpy, 1, rounds));
        System.out.printf("%d MiB: one-copy write %.2f GB/s, memcpy %.2f GB/s, ratio %.2f%n", size >> 20, s, m, s / m);
    }

    private static double median(double[] v) {
        double[] c = v.clone();
        Arrays.sort(c);
        return c[c.length / 2];
    }
}
