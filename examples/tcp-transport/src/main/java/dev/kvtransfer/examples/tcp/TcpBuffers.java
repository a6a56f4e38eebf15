package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Objects;

/**
 * ByteBuffer views of host memory for the socket calls, off-heap staging of messages that arrive before their
 * receive, and the deadline arithmetic every wait of the transport shares.
 */
final class TcpBuffers {
    /** Bytes of one ByteBuffer view (asByteBuffer works up to 2 GiB; larger ranges are split). */
    static final long VIEW = 1L << 30;

    private TcpBuffers() {
    }

    /** Views of {@code [offset, offset + length)} of {@code b}, each at most {@link #VIEW} bytes. */
    static ByteBuffer[] views(MemoryBuffer b, long offset, long length) {
        Objects.requireNonNull(b, "buffer");
        if (b.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the tcp transport does not declare DEVICE_MEMORY: it moves host"
                    + " memory only, not " + b);
        }
        Objects.checkFromIndexSize(offset, length, b.size());
        if (length == 0) {
            return new ByteBuffer[0];
        }
        int n = (int) ((length + VIEW - 1) / VIEW);
        ByteBuffer[] v = new ByteBuffer[n];
        for (int i = 0; i < n; i++) {
            long l = Math.min(VIEW, length - i * VIEW);
            ByteBuffer bb = b.slice(offset + i * VIEW, l).asByteBuffer();
            bb.clear();
            bb.limit((int) l);
            v[i] = bb;
        }
        return v;
    }

    /** Fresh direct buffers for a message of {@code length} bytes that no receive was waiting for. */
    static ByteBuffer[] staging(long length) {
        int n = (int) Math.max(0, (length + VIEW - 1) / VIEW);
        ByteBuffer[] v = new ByteBuffer[n];
        for (int i = 0; i < n; i++) {
            v[i] = ByteBuffer.allocateDirect((int) Math.min(VIEW, length - i * VIEW));
        }
        return v;
    }

    /** Copies a staged message into a receive's views (same total length). */
    static void copy(ByteBuffer[] src, ByteBuffer[] dst) {
        int d = 0;
        for (ByteBuffer s0 : src) {
            ByteBuffer s = s0.duplicate().clear();
            while (s.hasRemaining()) {
                ByteBuffer t = dst[d];
                if (!t.hasRemaining()) {
                    d++;
                    continue;
                }
                int n = Math.min(s.remaining(), t.remaining());
                ByteBuffer part = s.slice(s.position(), n);
                t.put(part);
                s.position(s.position() + n);
            }
        }
    }

    /** A duration in nanoseconds, saturated (a huge timeout means "practically never"). */
    static long nanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE / 4;
        }
    }

    /** The {@link System#nanoTime()} at which {@code timeout} from now ends, without overflow. */
    static long deadline(Duration timeout) {
        long now = System.nanoTime();
        long n = nanos(timeout);
        return n > Long.MAX_VALUE / 4 ? now + Long.MAX_VALUE / 4 : now + n;
    }
}
