package dev.kvtransfer.aeron;

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import org.agrona.CloseHelper;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;

/**
 * A hostile (or merely foreign) sender for the tests: an Aeron client of its own on a manager's media driver that
 * opens plain publications to the manager's UDP endpoint and offers whatever bytes a test crafts — HELLOs claiming
 * anyone, frames of any type and length, garbage. Each {@link #stream()} is one Aeron session.
 */
final class RawPeer implements AutoCloseable {
    private final Aeron client;
    private final String endpoint;

    RawPeer(AeronConnectionManager target) {
        this.client = Aeron.connect(new Aeron.Context().aeronDirectoryName(target.driverDirectory()));
        this.endpoint = Address.parse(target.localAddress()).hostPort();
    }

    /** A new session to the target, connected (bounded). */
    Stream stream() {
        ExclusivePublication p = client.addExclusivePublication("aeron:udp?endpoint=" + endpoint
                + "|mtu=32768|term-length=1m|sparse=true", AeronSettings.STREAM_ID);
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (!p.isConnected()) {
            if (System.nanoTime() - deadline > 0) {
                p.close();
                throw new IllegalStateException("the target did not answer within 10 s");
            }
            LockSupport.parkNanos(1_000_000);
        }
        return new Stream(p);
    }

    @Override
    public void close() {
        CloseHelper.quietClose(client);
    }

    /** One session's publication. */
    static final class Stream implements AutoCloseable {
        final ExclusivePublication publication;
        final UnsafeBuffer buffer = new UnsafeBuffer(ByteBuffer.allocateDirect(1 << 20));

        Stream(ExclusivePublication publication) {
            this.publication = publication;
        }

        /** Offers {@code length} bytes of {@link #buffer}; false when back-pressured past the deadline. */
        boolean offer(int length, Duration within) {
            long deadline = System.nanoTime() + within.toNanos();
            while (true) {
                long r = publication.offer(buffer, 0, length);
                if (r > 0) {
                    return true;
                }
                if (r == Publication.CLOSED || r == Publication.MAX_POSITION_EXCEEDED
                        || System.nanoTime() - deadline > 0) {
                    return false;
                }
                LockSupport.parkNanos(100_000);
            }
        }

        /** Writes our header at 0. */
        Stream header(int type, int tag, long seq, long value) {
            Wire.write(buffer, type, tag, seq, value);
            return this;
        }

        /** Writes a HELLO (header and body) claiming {@code sender}; returns its length. */
        int hello(Handshake h, String sender, String receiver, long incarnation, long timestampMs) {
            int body = h.encode(buffer, Wire.HEADER_LENGTH, sender, receiver, incarnation, timestampMs);
            Wire.write(buffer, Wire.HELLO, 0, 0, body);
            return Wire.HEADER_LENGTH + body;
        }

        @Override
        public void close() {
            CloseHelper.quietClose(publication);
        }
    }
}
