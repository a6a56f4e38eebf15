package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.WriteBatch;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/**
 * The conformance suite every transport passes. A backend's test is a short subclass:
 *
 * <pre>{@code
 * class AeronTransportConformanceTest extends TransportConformanceTest {
 *     protected TransportProvider provider() { return new AeronTransportProvider(); }
 * }
 * }</pre>
 *
 * <p>Test names carry the clause of {@code testkit/SPEC.md} they check ({@code required_spec1_NN_...} for every
 * transport, {@code optional_specS_NN_...} for capabilities): a failing test names the sentence that broke. A
 * capability the provider does not declare is not skipped: the suite asserts the documented refusal instead.
 * Each test creates its managers with {@link #newManager}; they and the host buffers are closed and checked
 * for leaks after the test. Every payload is filled with a pattern and verified byte by byte.
 *
 * <p>Every rule runs under {@link RuleBound} (180 s per rule; once one hung, 420 s for the class): a transport that
 * ignores deadlines and interrupts fails the rule that hung, naming the call, instead of hanging the build.
 *
 * <p>The rules live in families: {@link TransportDeliveryRules}, {@link TransportLifecycleRules} and, here, the
 * one-sided writes of SPEC.md §2.
 */
public abstract class TransportConformanceTest extends TransportAuthenticationRules {
    // ---- one-sided writes (ONE_SIDED_WRITE) ----

    private static final int GUARD = 4096;
    private static final byte SENTINEL = (byte) 0xA5;

    private boolean oneSided() {
        return provider().capabilities().contains(TransportCapability.ONE_SIDED_WRITE);
    }

    /** A region with guard zones of sentinel bytes on both sides, all sentinel to start with. */
    private MemoryBuffer guarded(long regionBytes) {
        MemoryBuffer whole = buffer(regionBytes + 2 * GUARD);
        ByteBuffer b = whole.asByteBuffer();
        for (int i = 0; i < b.capacity(); i++) {
            b.put(i, SENTINEL);
        }
        return whole;
    }

    private static void assertSentinel(MemoryBuffer whole, long from, long to, String what) {
        ByteBuffer b = whole.asByteBuffer();
        for (long i = from; i < to; i++) {
            if (b.get((int) i) != SENTINEL) {
                fail(what + ": byte " + i + " was written (" + b.get((int) i) + ")");
            }
        }
    }

    @Test
    public void optional_spec2_01_oneSidedWriteLandsExactlyAndOnlyWhereAsked() throws Exception {
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        if (!oneSided()) {
            MemoryBuffer m = buffer(64);
            assertThatThrownBy(() -> owner.register(m)).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("ONE_SIDED_WRITE");
            assertThatThrownBy(() -> writer.connection(owner.localAddress()).write(new WriteBatch(), Duration.ofSeconds(5)))
                    .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("ONE_SIDED_WRITE");
            return;
        }
        long size = (1L << 20) + 4096;
        MemoryBuffer whole = guarded(size);
        try (RegisteredRegion region = owner.register(whole.slice(GUARD, size))) {
            RegionDescriptor d = region.descriptor();
            assertThat(d.owner()).isEqualTo(owner.localAddress());
            assertThat(d.length()).isEqualTo(size);
            RegionDescriptor back = RegionDescriptor.readFrom(dev.kvtransfer.api.wire.WireReader.raw(
                    serialize(d)));
            assertThat(back).as("a descriptor survives its wire form").isEqualTo(d);
            MemoryBuffer src = buffer(size);
            fill(src, 0, size, 303);
            long[][] entries = {{3, 5, 1}, {11, 4099, 65537}, {70000, 70000, 0}, {size - 9, size - 7, 7},
                {200_000, 300_000, 500_000}};
            WriteBatch batch = new WriteBatch(2);
            for (long[] e : entries) {
                batch.add(src, e[0], back, e[1], e[2]);
            }
            Connection toOwner = writer.connection(owner.localAddress());
            toOwner.write(batch, Duration.ofSeconds(60));
            // A notification sent after the write returned never overtakes the bytes.
            MemoryBuffer note = buffer(8);
            toOwner.send(8100, note, 0, 8);
            owner.connection(writer.localAddress()).recv(8100, note, 0, 8, Duration.ofSeconds(30));
            boolean[] written = new boolean[(int) size];
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (long[] e : entries) {
                for (long i = 0; i < e[2]; i++) {
                    written[(int) (e[1] + i)] = true;
                    byte want = s.get((int) (e[0] + i));
                    byte got = w.get((int) (GUARD + e[1] + i));
                    if (want != got) {
                        fail("region byte " + (e[1] + i) + " (entry src " + e[0] + " dst " + e[1] + " len " + e[2]
                                + "): expected " + want + ", found " + got);
                    }
                }
            }
            for (int i = 0; i < size; i++) {
                if (!written[i] && w.get(GUARD + i) != SENTINEL) {
                    fail("region byte " + i + " was not asked for but was written");
                }
            }
            assertSentinel(whole, 0, GUARD, "guard before the region");
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
            // The batch is reusable after clear().
            batch.clear();
            assertThat(batch.size()).isZero();
            toOwner.write(batch, Duration.ofSeconds(5));
        }
    }

    private void assertRefusesOneSided() {
        ConnectionManager m = newManager();
        MemoryBuffer b = buffer(64);
        assertThatThrownBy(() -> m.register(b)).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("ONE_SIDED_WRITE");
    }

    private static byte[] serialize(RegionDescriptor d) {
        dev.kvtransfer.api.wire.WireWriter w = dev.kvtransfer.api.wire.WireWriter.raw();
        d.writeTo(w);
        return w.toByteArray();
    }

    @Test
    public void optional_spec2_02_oneSidedWritesOutsideTheRegionOrWithAForgedDescriptorAreRefused() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        ConnectionManager owner = newManager(b -> b.errorHandler(reported::add));
        ConnectionManager writer = newManager();
        long size = 64 * 1024;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(2 * size);
        fill(src, 0, 2 * size, 404);
        Connection toOwner = writer.connection(owner.localAddress());
        try (RegisteredRegion region = owner.register(whole.slice(GUARD, size))) {
            RegionDescriptor d = region.descriptor();
            // Outside the descriptor: refused before anything moves.
            assertThatThrownBy(() -> new WriteBatch().add(src, 0, d, size - 10, 11))
                    .isInstanceOf(IndexOutOfBoundsException.class).hasMessageContaining("leaves region");
            assertThatThrownBy(() -> new WriteBatch().add(src, 0, d, -1, 1))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            // Forged descriptors: a longer region, a shifted address, another key, an id never issued.
            byte[] otherKey = d.key();
            otherKey[0] ^= 0x5a;
            List<RegionDescriptor> forged = List.of(
                    new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length() + GUARD, d.key()),
                    new RegionDescriptor(d.owner(), d.regionId(), d.address() + 64, d.length(), d.key()),
                    new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(), otherKey),
                    new RegionDescriptor(d.owner(), d.regionId() + 1_000_000, d.address(), d.length(), d.key()));
            for (RegionDescriptor f : forged) {
                long off = f.length() > size ? size : 0;
                long len = f.length() > size ? GUARD : 4096;
                WriteBatch b = new WriteBatch().add(src, 0, f, off, len);
                assertThatThrownBy(() -> toOwner.write(b, Duration.ofSeconds(30)))
                        .as("write with forged %s", f)
                        .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                                .as("code of %s", e).isIn(ErrorCode.UNAUTHORIZED, ErrorCode.MALFORMED));
            }
            assertSentinel(whole, 0, size + 2 * GUARD, "region and guards after refused writes");
            // The transport keeps serving: a genuine write still lands.
            toOwner.write(new WriteBatch().add(src, 0, d, 0, size), Duration.ofSeconds(30));
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (int i = 0; i < size; i++) {
                assertThat(w.get(GUARD + i)).isEqualTo(s.get(i));
            }
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
        }
        if (!provider().capabilities().contains(TransportCapability.NATIVE_ONE_SIDED_WRITE)) {
            // The owner of an emulated write saw every refusal: they reached its error handler.
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10))
                    .untilAsserted(() -> assertThat(reported).hasSizeGreaterThanOrEqualTo(4));
        }
    }

    @Test
    public void optional_spec2_03_writesIntoADeregisteredRegionAreRefusedAndTouchNothing() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        long size = 64 * 1024;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 505);
        Connection toOwner = writer.connection(owner.localAddress());
        RegisteredRegion region = owner.register(whole.slice(GUARD, size));
        RegionDescriptor d = region.descriptor();
        toOwner.write(new WriteBatch().add(src, 0, d, 0, 16), Duration.ofSeconds(30)); // the writer knows it
        ByteBuffer w = whole.asByteBuffer();
        for (int i = 0; i < size + 2 * GUARD; i++) {
            w.put(i, SENTINEL);
        }
        region.close();
        region.close(); // idempotent
        assertThatThrownBy(() -> toOwner.write(new WriteBatch().add(src, 0, d, 0, size), Duration.ofSeconds(30)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).as("code of %s", e)
                        .isIn(ErrorCode.CANCELLED, ErrorCode.UNAUTHORIZED));
        assertSentinel(whole, 0, size + 2 * GUARD, "memory of a deregistered region");
    }

    @Test
    public void optional_spec2_04_peerLossAndCloseEndAOneSidedWrite() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        long size = 32L << 20;
        MemoryBuffer target = buffer(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 606);
        RegisteredRegion region = owner.register(target);
        RegionDescriptor d = region.descriptor();
        Connection toOwner = writer.connection(owner.localAddress());
        toOwner.write(new WriteBatch().add(src, 0, d, 0, 8), Duration.ofSeconds(30));
        // The owner goes away while (or before) a large write runs: the write ends, in bound, with an error.
        WriteBatch big = new WriteBatch();
        for (long off = 0; off < size; off += 1 << 20) {
            big.add(src, off, d, off, 1 << 20);
        }
        ExecutorService ex = threads(1);
        Future<?> w = ex.submit(() -> {
            toOwner.write(big, peerLossBound().multipliedBy(3));
            return null;
        });
        long t0 = System.nanoTime();
        owner.close();
        try {
            get(w);
        } catch (TransportException e) {
            assertThat(e.code()).as("code of %s", e).isIn(ErrorCode.PEER_LOST, ErrorCode.NETWORK,
                    ErrorCode.CANCELLED, ErrorCode.TIMEOUT);
        }
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound().multipliedBy(3)
                .plus(timeoutSlack()));
        // The writer's own close fails its later writes at once.
        writer.close();
        assertThatThrownBy(() -> toOwner.write(new WriteBatch().add(src, 0, d, 0, 8), Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        if (provider().capabilities().contains(TransportCapability.NATIVE_ONE_SIDED_WRITE)) {
            assertThat(provider().capabilities()).contains(TransportCapability.ONE_SIDED_WRITE);
        }
    }

    @Test
    public void optional_spec2_05_aRegionBoundToItsWritersRefusesEveryOtherPeer() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        ConnectionManager owner = newManager();
        ConnectionManager granted = newManager();
        ConnectionManager other = newManager();
        long size = 64 * 1024;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 707);
        RegisteredRegion region;
        try {
            region = owner.register(whole.slice(GUARD, size), java.util.Set.of(granted.localAddress()));
        } catch (UnsupportedOperationException cannotBind) {
            // Allowed (native RMA cannot tell a writer): the plain registration still works and says nothing else.
            owner.register(whole.slice(GUARD, size)).close();
            return;
        }
        try (region) {
            RegionDescriptor d = region.descriptor();
            // Another peer holding the genuine descriptor (its key travelled in clear) is refused, touching nothing.
            Connection fromOther = other.connection(owner.localAddress());
            assertThatThrownBy(() -> fromOther.write(new WriteBatch().add(src, 0, d, 0, size), Duration.ofSeconds(30)))
                    .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                            .as("code of %s", e).isEqualTo(ErrorCode.UNAUTHORIZED));
            assertSentinel(whole, 0, size + 2 * GUARD, "region after another peer's write");
            // The granted peer's write lands exactly.
            granted.connection(owner.localAddress()).write(new WriteBatch().add(src, 0, d, 0, size),
                    Duration.ofSeconds(30));
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (int i = 0; i < size; i++) {
                if (w.get(GUARD + i) != s.get(i)) {
                    fail("region byte " + i + " of the granted peer's write: expected " + s.get(i) + ", found "
                            + w.get(GUARD + i));
                }
            }
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
        }
    }

    @Test
    public void optional_spec2_06_aSummedWriteSumsEachEntrysSourceOrDeclinesWritingNothing() throws Exception {
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        if (!oneSided()) {
            assertRefusesOneSided();
            assertThat(writer.connection(owner.localAddress()).writeSummed(new WriteBatch(), Duration.ofSeconds(5),
                    new int[0])).as("a transport without ONE_SIDED_WRITE declines").isFalse();
            return;
        }
        long size = (3L << 20) + 333;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 808);
        try (RegisteredRegion region = owner.register(whole.slice(GUARD, size))) {
            RegionDescriptor d = region.descriptor();
            long[][] entries = {{0, size - (1L << 20), (1L << 20) - 1}, {7, 0, (2L << 20) + 1}, {size - 1, size - 1, 1},
                {5, 99, 0}};
            WriteBatch batch = new WriteBatch();
            for (long[] e : entries) {
                batch.add(src, e[0], d, e[1], e[2]);
            }
            Connection toOwner = writer.connection(owner.localAddress());
            assertThatThrownBy(() -> toOwner.writeSummed(batch, Duration.ofSeconds(30), new int[3]))
                    .as("fewer slots than entries").isInstanceOf(IllegalArgumentException.class);
            assertSentinel(whole, 0, size + 2 * GUARD, "region after a refused summed write");
            int[] crcs = new int[entries.length + 2];
            java.util.Arrays.fill(crcs, 0x5A5A5A5A);
            if (!toOwner.writeSummed(batch, Duration.ofSeconds(60), crcs)) {
                assertSentinel(whole, 0, size + 2 * GUARD, "region after a declined summed write");
                assertThat(crcs).as("a declined write leaves the sums alone").containsOnly(0x5A5A5A5A);
                return;
            }
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (int k = 0; k < entries.length; k++) {
                long[] e = entries[k];
                java.util.zip.CRC32C want = new java.util.zip.CRC32C();
                for (long i = 0; i < e[2]; i++) {
                    byte b = s.get((int) (e[0] + i));
                    want.update(b);
                    if (w.get((int) (GUARD + e[1] + i)) != b) {
                        fail("region byte " + (e[1] + i) + " of summed entry " + k + ": expected " + b + ", found "
                                + w.get((int) (GUARD + e[1] + i)));
                    }
                }
                assertThat(crcs[k]).as("CRC32C of entry %d's source", k).isEqualTo((int) want.getValue());
            }
            assertSentinel(whole, 0, GUARD, "guard before the region");
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
        }
    }
}
