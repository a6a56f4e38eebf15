package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.testkit.PostedOutcome;
import dev.kvtransfer.transport.support.EmulatedOneSided;
import dev.kvtransfer.transport.support.VectoredMessages;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * UCX's vectored messages ({@link VectoredMessages}, UCX's IOV datatype): a message gathered from ranges arrives
 * whole in a plain receive, a plain message is scattered into a vectored receive's ranges, and vectored meets
 * vectored, byte-exact, at eager and rendezvous sizes, in shared-memory mode with CMA; a vectored receive of a
 * message of another length ends {@code MALFORMED} once and the tag keeps moving; the emulated one-sided write of a
 * batch travels as one vectored message, every byte in place; all with {@code ucx.vectoredWrites} on. Without it
 * (the default), in net mode or shm without CMA a vectored receive is refused (nothing posted) and a vectored send
 * still arrives whole.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxVectoredMessagesTest {
    /** Range lengths: one byte, odd sizes, an eager-sized and rendezvous-sized range in one message. */
    private static final long[] LENGTHS = {1, (4 << 10) + 3, 128 << 10, 1 << 20, 17};
    private static final long[] SMALL = {3, 5, 100};
    private static final long GAP = 61;
    private final List<UcxConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void tearDown() {
        for (UcxConnectionManager m : managers) {
            m.close();
        }
        for (MemoryBuffer b : buffers) {
            b.close();
        }
    }

    /** A manager with {@code ucx.vectoredWrites} on. */
    private UcxConnectionManager manager(String name, String mode) {
        return manager(name, mode, true, true);
    }

    private UcxConnectionManager manager(String name, String mode, boolean cma, boolean vectored) {
        UcxConnectionManager m = (UcxConnectionManager) new UcxTransportProvider().create(
                dev.kvtransfer.api.transport.TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                        .property(UcxSettings.TRANSPORTS, mode).property(UcxSettings.CMA, Boolean.toString(cma))
                        .property(UcxSettings.VECTORED_WRITES, Boolean.toString(vectored))
                        .errorHandler(errors::add).build());
        managers.add(m);
        return m;
    }

    private MemoryBuffer buf(long bytes) {
        MemoryBuffer b = buffer(bytes);
        buffers.add(b);
        return b;
    }

    private static long total(long[] lengths) {
        long t = 0;
        for (long n : lengths) {
            t += n;
        }
        return t;
    }

    /** Offsets of the ranges in one buffer, {@link #GAP} bytes apart, in order or last range first. */
    private static long[] offsets(long[] lengths, boolean reversed) {
        long[] at = new long[lengths.length];
        long pos = GAP;
        for (int k = 0; k < lengths.length; k++) {
            int i = reversed ? lengths.length - 1 - k : k;
            at[i] = pos;
            pos += lengths[i] + GAP;
        }
        return at;
    }

    private static MemoryBuffer[] same(MemoryBuffer b, int n) {
        MemoryBuffer[] all = new MemoryBuffer[n];
        java.util.Arrays.fill(all, b);
        return all;
    }

    /**
     * Fills the ranges of {@code src} (range i with seed {@code seed + i}), sends them as one gathered message and
     * takes it with a plain receive of the total, verified range by range; the send ended once, without failure.
     *
     * @return the received message
     */
    private MemoryBuffer gatheredIntoAPlainReceive(VectoredMessages ab, Connection ba, int tag, long[] lengths,
                                                   MemoryBuffer src, long[] srcAt, int seed) {
        int n = lengths.length;
        long total = total(lengths);
        for (int i = 0; i < n; i++) {
            fill(src, srcAt[i], lengths[i], seed + i);
        }
        MemoryBuffer whole = buf(total);
        Outcome sent = new Outcome();
        assertThat(ab.sendvAsync(tag, same(src, n), srcAt, lengths, 0, n, Duration.ofSeconds(20), sent)).isTrue();
        ba.recv(tag, whole, 0, total, Duration.ofSeconds(20));
        sent.awaitEnded();
        assertThat(sent.failure()).isNull();
        assertThat(sent.calls()).isEqualTo(1);
        long pos = 0;
        for (int i = 0; i < n; i++) {
            verify(whole, pos, lengths[i], seed + i);
            pos += lengths[i];
        }
        return whole;
    }

    /** A posted operation's callback: {@link PostedOutcome}, awaited with this test's bound. */
    private static final class Outcome extends PostedOutcome {
        void awaitEnded() {
            awaitEnded(Duration.ofSeconds(20));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm-default", "net", "shm-nocma"})
    void withoutVectoredWritesAVectoredReceiveIsRefusedAndAVectoredSendArrivesWhole(String mode) {
        String transports = mode.startsWith("shm") ? "shm" : "net";
        boolean cma = !mode.equals("shm-nocma");
        boolean vectored = !mode.equals("shm-default");
        UcxConnectionManager a = manager("vn-a-" + mode, transports, cma, vectored);
        UcxConnectionManager b = manager("vn-b-" + mode, transports, cma, vectored);
        VectoredMessages ab = (VectoredMessages) a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        assertThat(b.settings().vectoredWrites()).isFalse();
        int n = LENGTHS.length;
        long total = total(LENGTHS);
        MemoryBuffer dst = buf(total + (n + 1) * GAP);
        Outcome refused = new Outcome();
        assertThat(((VectoredMessages) ba).recvvAsync(500, same(dst, n), offsets(LENGTHS, true), LENGTHS, 0, n,
                Duration.ofSeconds(20), refused)).as("a vectored receive here").isFalse();
        long[] srcAt = offsets(LENGTHS, false);
        gatheredIntoAPlainReceive(ab, ba, 500, LENGTHS, buf(total + (n + 1) * GAP), srcAt, 600);
        assertThat(refused.calls()).as("a refused receive never ends").isZero();
        assertThat(errors).isEmpty();
    }

    @Test
    void gatheredAndScatteredMessagesArriveByteExact() {
        String mode = "shm";
        UcxConnectionManager a = manager("v-a-" + mode, mode);
        UcxConnectionManager b = manager("v-b-" + mode, mode);
        VectoredMessages ab = (VectoredMessages) a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        for (long[] lengths : new long[][] {LENGTHS, SMALL}) {
            int n = lengths.length;
            long total = total(lengths);
            long[] srcAt = offsets(lengths, false);
            long[] dstAt = offsets(lengths, true);
            MemoryBuffer src = buf(total + (n + 1) * GAP);
            MemoryBuffer whole = gatheredIntoAPlainReceive(ab, ba, 300, lengths, src, srcAt, 100);
            // A plain message scattered into ranges that lie last range first.
            VectoredMessages baV = (VectoredMessages) ba;
            Connection abC = (Connection) ab;
            MemoryBuffer dst = buf(total + (n + 1) * GAP);
            Outcome received = new Outcome();
            assertThat(baV.recvvAsync(301, same(dst, n), dstAt, lengths, 0, n, Duration.ofSeconds(20), received))
                    .isTrue();
            abC.send(301, whole, 0, total, Duration.ofSeconds(20));
            received.awaitEnded();
            assertThat(received.failure()).isNull();
            for (int i = 0; i < n; i++) {
                verify(dst, dstAt[i], lengths[i], 100 + i);
            }
            // Vectored to vectored, a range subset of the arrays (from = 1).
            MemoryBuffer dst2 = buf(total + (n + 1) * GAP);
            Outcome in = new Outcome();
            Outcome out = new Outcome();
            assertThat(baV.recvvAsync(302, same(dst2, n), dstAt, lengths, 1, n - 1, Duration.ofSeconds(20), in))
                    .isTrue();
            assertThat(ab.sendvAsync(302, same(src, n), srcAt, lengths, 1, n - 1, Duration.ofSeconds(20), out))
                    .isTrue();
            in.awaitEnded();
            out.awaitEnded();
            assertThat(in.failure()).isNull();
            assertThat(out.failure()).isNull();
            for (int i = 1; i < n; i++) {
                verify(dst2, dstAt[i], lengths[i], 100 + i);
            }
            assertThat(in.calls() + out.calls() + received.calls()).isEqualTo(3);
        }
        assertThat(errors).isEmpty();
    }

    @Test
    void aVectoredReceiveOfAMessageOfAnotherLengthEndsMalformedOnceAndTheTagKeepsMoving() {
        UcxConnectionManager a = manager("vm-a", "shm");
        UcxConnectionManager b = manager("vm-b", "shm");
        Connection ab = a.connection(b.localAddress());
        VectoredMessages ba = (VectoredMessages) b.connection(a.localAddress());
        long total = total(LENGTHS);
        int n = LENGTHS.length;
        MemoryBuffer dst = buf(total + (n + 1) * GAP);
        long[] dstAt = offsets(LENGTHS, true);
        Outcome r = new Outcome();
        assertThat(ba.recvvAsync(400, same(dst, n), dstAt, LENGTHS, 0, n, Duration.ofSeconds(20), r)).isTrue();
        MemoryBuffer longer = buf(total + 1);
        fill(longer, 0, total + 1, 7);
        ab.send(400, longer, 0, total + 1, Duration.ofSeconds(20));
        r.awaitEnded();
        assertThat(r.failure()).isNotNull().satisfies(e -> assertThat(e.code()).as(e.getMessage())
                .isEqualTo(ErrorCode.MALFORMED));
        // The tag goes on: a message of the right length scatters into the same ranges.
        MemoryBuffer right = buf(total);
        long pos = 0;
        for (int i = 0; i < n; i++) {
            fill(right, pos, LENGTHS[i], 200 + i);
            pos += LENGTHS[i];
        }
        Outcome r2 = new Outcome();
        assertThat(ba.recvvAsync(400, same(dst, n), dstAt, LENGTHS, 0, n, Duration.ofSeconds(20), r2)).isTrue();
        ab.send(400, right, 0, total, Duration.ofSeconds(20));
        r2.awaitEnded();
        assertThat(r2.failure()).isNull();
        for (int i = 0; i < n; i++) {
            verify(dst, dstAt[i], LENGTHS[i], 200 + i);
        }
        assertThat(r.calls()).isEqualTo(1);
    }

    @Test
    void anEmulatedWriteBatchTravelsAsOneVectoredMessage() throws Exception {
        UcxConnectionManager a = manager("vw-a", "shm");
        UcxConnectionManager b = manager("vw-b", "shm");
        int entries = 64;
        long entry = 32 << 10;
        MemoryBuffer region = buf(entries * entry);
        RegisteredRegion r = b.register(region);
        MemoryBuffer src = buf(entries * entry);
        WriteBatch batch = new WriteBatch();
        for (int i = 0; i < entries; i++) {
            fill(src, i * entry, entry, 300 + i);
            batch.add(src, i * entry, r.descriptor(), (entries - 1 - i) * entry, entry); // last entry first
        }
        Connection ab = a.connection(b.localAddress());
        ab.write(batch, Duration.ofSeconds(20));
        for (int i = 0; i < entries; i++) {
            verify(region, (entries - 1 - i) * entry, entry, 300 + i);
        }
        java.lang.reflect.Field f = UcxConnectionManager.class.getDeclaredField("emulated");
        f.setAccessible(true);
        EmulatedOneSided owner = (EmulatedOneSided) f.get(b);
        assertThat(owner.vectoredBatches()).as("batches the owner took as one vectored message").isEqualTo(1);
        ab.write(batch, Duration.ofSeconds(20));
        assertThat(owner.vectoredBatches()).isEqualTo(2);
        r.close();
        assertThat(errors).isEmpty();
    }
}
