package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.ByteBuffer;
import java.time.Duration;

import static org.assertj.core.api.Assertions.fail;

/** Pattern fill / verify over host buffers and manager configs for this module's own tests. */
final class UcxTestSupport {
    private UcxTestSupport() {
    }

    static TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30)).build();
    }

    /**
     * A manager in a mode ({@code ucx.transports}: shm or net) whose background errors go to {@code errors}; the
     * caller closes it.
     */
    static UcxConnectionManager manager(String name, String mode, java.util.List<Throwable> errors) {
        return (UcxConnectionManager) new UcxTransportProvider().create(TransportConfig.builder().name(name)
                .defaultTimeout(Duration.ofSeconds(30)).property("ucx.transports", mode).errorHandler(errors::add)
                .build());
    }

    /** Host memory for this module's tests (core's page-aligned off-heap buffers, the project's one host type). */
    static final HostBufferManager MEMORY = new HostBufferManager();

    static MemoryBuffer buffer(long bytes) {
        return MEMORY.allocate(bytes, MemoryKind.HOST);
    }

    /** One message each way between two managers on a tag pair, verified. */
    static void exchange(dev.kvtransfer.api.transport.ConnectionManager a,
                         dev.kvtransfer.api.transport.ConnectionManager b, int tag, long seed) {
        MemoryBuffer m = buffer(256);
        fill(m, 0, 256, seed);
        a.connection(b.localAddress()).send(tag, m, 0, 256);
        MemoryBuffer in = buffer(256);
        b.connection(a.localAddress()).recv(tag, in, 0, 256, Duration.ofSeconds(20));
        verify(in, 0, 256, seed);
        fill(m, 0, 256, seed + 1);
        b.connection(a.localAddress()).send(tag + 1, m, 0, 256);
        a.connection(b.localAddress()).recv(tag + 1, in, 0, 256, Duration.ofSeconds(20));
        verify(in, 0, 256, seed + 1);
        m.close();
        in.close();
    }

    /** The byte at index {@code i} of message {@code seed}: a cheap mix so shifted or swapped data shows. */
    static byte patternByte(long seed, long i) {
        long x = (seed * 0x9E3779B97F4A7C15L) ^ (i * 0xC2B2AE3D27D4EB4FL);
        x ^= x >>> 29;
        return (byte) (x ^ (x >>> 13));
    }

    static void fill(MemoryBuffer b, long offset, long length, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        for (long i = 0; i < length; i++) {
            bb.put((int) (offset + i), patternByte(seed, i));
        }
    }

    static void verify(MemoryBuffer b, long offset, long length, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        for (long i = 0; i < length; i++) {
            byte got = bb.get((int) (offset + i));
            byte expect = patternByte(seed, i);
            if (got != expect) {
                fail("message " + seed + " of " + length + " bytes differs at byte " + i + ": expected " + expect
                        + ", found " + got);
            }
        }
    }
}
