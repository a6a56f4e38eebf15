package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.SharedMappings;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * One-copy writes between managers of one host ({@code ShmOwner}, {@code ShmWriter}): the writer copies straight into
 * the owner's pool file, every byte verified; only a peer that proved the secret and holds the grant gets the
 * mapping; a revoked grant takes no byte after its close returned; the file is owner-only.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronSharedMemoryWritesTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final byte[] SECRET = "kvtransfer-shm-test-secret-0123456789".getBytes(StandardCharsets.UTF_8);
    private static final byte[] OTHER = "another-secret-of-another-deployment".getBytes(StandardCharsets.UTF_8);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();
    private final HostBufferManager pools = new HostBufferManager(false, true);
    private ExecutorService threads;

    @AfterEach
    void stop() throws Exception {
        if (threads != null) {
            threads.shutdownNow();
            assertThat(threads.awaitTermination(20, TimeUnit.SECONDS)).isTrue();
        }
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
        pools.close();
        assertThat(AeronRuntime.running()).isZero();
    }

    private AeronConnectionManager manager(String name, byte[] secret, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(T).authSecret(secret)
                .property(AeronSettings.PEER_TIMEOUT_MS, "1500").errorHandler(errors::add);
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
        closeables.add(m);
        return m;
    }

    private MemoryBuffer pool(long size) {
        MemoryBuffer b = pools.allocatePool(size, MemoryKind.HOST);
        closeables.add(b);
        return b;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(size);
        closeables.add(b);
        return b;
    }

    @Test
    void aBatchIsCopiedOnceStraightIntoTheOwnersPoolEveryByteVerified() {
        AeronConnectionManager owner = manager("owner", SECRET);
        AeronConnectionManager writer = manager("writer", SECRET);
        long size = 24L << 20;
        MemoryBuffer pool = pool(size + (1 << 20));
        assertThat(SharedMappings.find(pool.address(), pool.size())).as("the pool lies in a shared file").isNotNull();
        TestPattern.fill(pool, 0, pool.size(), 7);
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(src, 0, size, 41);
        RegisteredRegion region = owner.register(pool.slice(1 << 20, size), Set.of(writer.localAddress()));
        assertThat(region.descriptor().key()).as("marker, then the writer's slot")
                .hasSize(ShmOwner.KEY_HEADER + ShmOwner.WRITER_ENTRY);
        long granted = ShmOwner.granted();
        long copied = ShmWriter.copiedBytes();
        Connection c = writer.connection(owner.localAddress());
        // A scatter: the second half first, then 64 KiB pieces of the first half in reverse order, then one entry
        // larger than a fence piece.
        WriteBatch batch = new WriteBatch();
        long half = size / 2;
        batch.add(src, half, region.descriptor(), half, half);
        for (long off = half - (64 << 10); off >= 0; off -= 64 << 10) {
            batch.add(src, off, region.descriptor(), off, 64 << 10);
        }
        c.write(batch, T);
        TestPattern.assertPattern(pool.slice(1 << 20, size), 0, size, 41);
        assertThat(TestPattern.firstMismatch(pool, 0, 1 << 20, 7)).as("bytes before the grant untouched").isNegative();
        assertThat(c.writeCopiesPerByte(size)).as("copies per byte on the ledger").isEqualTo(1);
        assertThat(ShmOwner.granted() - granted).as("grants handed out").isEqualTo(1);
        assertThat(ShmWriter.copiedBytes() - copied).as("bytes copied through shared memory").isEqualTo(size);
        // A second batch into the same grant needs no new hand-out.
        TestPattern.fill(src, 0, size, 42);
        batch.clear();
        batch.add(src, 0, region.descriptor(), 0, size);
        c.write(batch, T);
        TestPattern.assertPattern(pool.slice(1 << 20, size), 0, size, 42);
        assertThat(ShmOwner.granted() - granted).isEqualTo(1);
        region.close();
        assertThat(errors).isEmpty();
    }

    /**
     * A grant whose key hands the writer its slot, in a pool file the writer mapped through an earlier exchange with
     * the same owner, is written without an exchange: every byte lands, nothing outside it changes, and once the grant
     * is revoked its slot refuses the writer (CANCELLED) and no late byte lands. A key that names other writers
     * only, or whose place does not fit the file, leaves the writer to the exchange, which decides as before.
     */
    @Test
    void aLaterGrantInAMappedFileIsWrittenWithoutAnExchangeAndItsRevocationHolds() {
        AeronConnectionManager owner = manager("owner", SECRET);
        AeronConnectionManager writer = manager("writer", SECRET);
        long size = 1L << 20;
        MemoryBuffer pool = pool(4 * size);
        for (int q = 0; q < 4; q++) {
            TestPattern.fill(pool, q * size, size, 3); // each quarter checked on its own below
        }
        OffHeapBuffer src = buffer(size);
        Connection c = writer.connection(owner.localAddress());
        RegisteredRegion first = owner.register(pool.slice(0, size), Set.of(writer.localAddress()));
        long granted = ShmOwner.granted();
        TestPattern.fill(src, 0, size, 51);
        WriteBatch batch = new WriteBatch();
        batch.add(src, 0, first.descriptor(), 0, size);
        c.write(batch, T);
        assertThat(ShmOwner.granted() - granted).as("the first grant of the file: one exchange").isEqualTo(1);
        first.close();
        RegisteredRegion second = owner.register(pool.slice(2 * size, size), Set.of(writer.localAddress()));
        TestPattern.fill(src, 0, size, 52);
        batch.clear();
        batch.add(src, 0, second.descriptor(), 0, size);
        long copied = ShmWriter.copiedBytes();
        c.write(batch, T);
        assertThat(ShmOwner.granted() - granted).as("the second grant: its key sufficed").isEqualTo(1);
        assertThat(ShmWriter.copiedBytes() - copied).isEqualTo(size);
        TestPattern.assertPattern(pool.slice(2 * size, size), 0, size, 52);
        assertThat(TestPattern.firstMismatch(pool, size, size, 3)).as("between the grants untouched").isNegative();
        assertThat(TestPattern.firstMismatch(pool, 3 * size, size, 3)).as("after the grant untouched").isNegative();
        second.close();
        TestPattern.fill(src, 0, size, 53);
        assertThatThrownBy(() -> c.write(batch, T)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isEqualTo(ErrorCode.CANCELLED));
        TestPattern.assertPattern(pool.slice(2 * size, size), 0, size, 52);
        // A grant for another writer only: this writer's tag is not in the key, so it asks, and is refused.
        RegisteredRegion others = owner.register(pool.slice(3 * size, size), Set.of("127.0.0.1:1/inc/00"));
        batch.clear();
        batch.add(src, 0, others.descriptor(), 0, size);
        assertThatThrownBy(() -> c.write(batch, T)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isEqualTo(ErrorCode.UNAUTHORIZED));
        assertThat(TestPattern.firstMismatch(pool, 3 * size, size, 3)).as("refused: untouched").isNegative();
        assertThat(ShmOwner.granted() - granted).isEqualTo(1);
        // A key whose place leaves the file: not trusted, the exchange places the bytes where the grant is.
        RegisteredRegion third = owner.register(pool.slice(size, size), Set.of(writer.localAddress()));
        byte[] key = third.descriptor().key().clone();
        java.nio.ByteBuffer.wrap(key).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(24, Long.MAX_VALUE - 7);
        RegionDescriptor d = third.descriptor();
        batch.clear();
        batch.add(src, 0, new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(), key), 0, size);
        c.write(batch, T);
        assertThat(ShmOwner.granted() - granted).as("asked for the grant the key did not place").isEqualTo(2);
        TestPattern.assertPattern(pool.slice(size, size), 0, size, 53);
        third.close();
        others.close();
        errors.removeIf(e -> e.getMessage().contains("granted to other peers"));
        assertThat(errors).isEmpty();
    }

    /**
     * {@code writeSummed}: each entry's CRC32C is that of its source bytes, summed in the copy's pass for the shared
     * entries (pieces larger than a fence piece and not a multiple of the sum chunk included) and apart for those
     * that go emulated; every byte lands as with {@code write}. A writer whose path is off declines and writes
     * nothing.
     */
    @Test
    void aSummedBatchCarriesEachEntrysCrcOfItsSourceEveryByteVerified() {
        AeronConnectionManager owner = manager("owner", SECRET);
        AeronConnectionManager writer = manager("writer", SECRET);
        long size = (17L << 20) + 12_345;
        MemoryBuffer pool = pool(size);
        OffHeapBuffer privatePool = buffer(1L << 20);
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(pool, 0, size, 7);
        TestPattern.fill(src, 0, size, 45);
        RegisteredRegion shared = owner.register(pool, Set.of(writer.localAddress()));
        RegisteredRegion apart = owner.register(privatePool, Set.of(writer.localAddress()));
        Connection c = writer.connection(owner.localAddress());
        long big = size - (1L << 20);
        WriteBatch batch = new WriteBatch()
                .add(src, 0, shared.descriptor(), 0, big)
                .add(src, big, apart.descriptor(), 0, 1L << 20)
                .add(src, big, shared.descriptor(), big, 1L << 20)
                .add(src, 3, shared.descriptor(), 3, 0);
        long copied = ShmWriter.copiedBytes();
        int[] crcs = new int[batch.size()];
        assertThat(c.writeSummed(batch, T, crcs)).isTrue();
        TestPattern.assertPattern(pool, 0, size, 45);
        assertThat(privatePool.asByteBuffer()).as("the emulated entry's bytes")
                .isEqualTo(src.slice(big, 1L << 20).asByteBuffer());
        assertThat(ShmWriter.copiedBytes() - copied).as("through shared memory").isEqualTo(size);
        for (int i = 0; i < batch.size(); i++) {
            assertThat(crcs[i]).as("CRC32C of entry " + i).isEqualTo(crc(src, batch.sourceOffset(i), batch.length(i)));
        }
        assertThatThrownBy(() -> c.writeSummed(batch, T, new int[2])).isInstanceOf(IllegalArgumentException.class);

        AeronConnectionManager off = manager("writer-off", SECRET, AeronSettings.SHARED_MEMORY_WRITES, "false");
        RegisteredRegion forOff = owner.register(pool, Set.of(off.localAddress()));
        TestPattern.fill(src, 0, size, 46);
        assertThat(off.connection(owner.localAddress())
                .writeSummed(new WriteBatch().add(src, 0, forOff.descriptor(), 0, size), T, new int[1]))
                .as("declined: the path is off").isFalse();
        TestPattern.assertPattern(pool, 0, size, 45);
        forOff.close();
        apart.close();
        shared.close();
        assertThat(errors).isEmpty();
    }

    private static int crc(MemoryBuffer b, long offset, long length) {
        java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
        if (length > 0) {
            crc.update(b.slice(offset, length).asByteBuffer());
        }
        return (int) crc.getValue();
    }

    @Test
    void withoutASecretNoMappingIsHandedOutAndWritesStayEmulated() {
        AeronConnectionManager owner = manager("owner", null);
        AeronConnectionManager writer = manager("writer", null);
        long size = 3L << 20;
        MemoryBuffer pool = pool(size);
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(src, 0, size, 43);
        RegisteredRegion region = owner.register(pool);
        assertThat(region.descriptor().key()).as("no shared-memory marker").hasSize(16);
        long copied = ShmWriter.copiedBytes();
        Connection c = writer.connection(owner.localAddress());
        c.write(new WriteBatch().add(src, 0, region.descriptor(), 0, size), T);
        TestPattern.assertPattern(pool, 0, size, 43);
        assertThat(ShmWriter.copiedBytes() - copied).isZero();
        assertThat(c.writeCopiesPerByte(size)).as("emulated over IPC").isEqualTo(2);
        region.close();
    }

    @Test
    void turnedOffByItsKeyWritesStayEmulated() {
        AeronConnectionManager owner = manager("owner", SECRET, AeronSettings.SHARED_MEMORY_WRITES, "false");
        AeronConnectionManager writer = manager("writer", SECRET);
        long size = 1L << 20;
        MemoryBuffer pool = pool(size);
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(src, 0, size, 44);
        RegisteredRegion region = owner.register(pool);
        assertThat(region.descriptor().key()).hasSize(16);
        Connection c = writer.connection(owner.localAddress());
        c.write(new WriteBatch().add(src, 0, region.descriptor(), 0, size), T);
        TestPattern.assertPattern(pool, 0, size, 44);
        assertThat(c.writeCopiesPerByte(size)).isEqualTo(2);
        region.close();
    }

    @Test
    void aPeerWithoutTheSecretNeverGetsTheMappingAndAnUngrantedWriterIsRefused() throws Exception {
        AeronConnectionManager owner = manager("owner", SECRET);
        AeronConnectionManager writer = manager("writer", SECRET);
        AeronConnectionManager bystander = manager("bystander", SECRET);
        AeronConnectionManager intruder = manager("intruder", OTHER);
        long size = 1L << 20;
        MemoryBuffer pool = pool(size);
        TestPattern.fill(pool, 0, size, 7);
        RegisteredRegion region = owner.register(pool, Set.of(writer.localAddress()));
        long granted = ShmOwner.granted();
        // The intruder knows the genuine descriptor (key included) and asks for the mapping directly.
        OffHeapBuffer req = buffer(ShmOwner.REQUEST_BYTES);
        OffHeapBuffer rep = buffer(ShmOwner.REPLY_BYTES);
        ByteBuffer q = req.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
        q.putInt(0, ShmOwner.MAGIC);
        q.putLong(8, 1);
        q.putLong(16, region.descriptor().regionId());
        q.put(24, region.descriptor().key(), 0, 16);
        q.putLong(40, ProcessHandle.current().pid());
        q.putLong(48, region.descriptor().address());
        q.putLong(56, ShmOwner.PID_NAMESPACE);
        Connection in = intruder.connection(owner.localAddress());
        assertThatThrownBy(() -> {
            in.send(ShmOwner.MAP_REQUEST_TAG, req, 0, ShmOwner.REQUEST_BYTES, T);
            in.recv(ShmOwner.MAP_REPLY_TAG, rep, 0, ShmOwner.REPLY_BYTES, Duration.ofSeconds(5));
        }).isInstanceOf(TransportException.class)
                .satisfies(e -> assertThat(((TransportException) e).code()).isEqualTo(ErrorCode.UNAUTHORIZED));
        String path = SharedMappings.find(pool.address(), size).file();
        assertThat(ShmOwner.text(rep.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN), ShmOwner.PATH_AT))
                .as("nothing of the reply reached the intruder").doesNotContain(path);
        assertThat(ShmOwner.granted() - granted).isZero();
        // A peer with the secret that the grant does not name is refused and writes nothing.
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(src, 0, size, 45);
        WriteBatch b = new WriteBatch().add(src, 0, region.descriptor(), 0, size);
        assertThatThrownBy(() -> bystander.connection(owner.localAddress()).write(b, T))
                .isInstanceOf(TransportException.class)
                .satisfies(e -> assertThat(((TransportException) e).code()).isEqualTo(ErrorCode.UNAUTHORIZED));
        assertThat(TestPattern.firstMismatch(pool, 0, size, 7)).as("pool untouched").isNegative();
        assertThat(ShmOwner.granted() - granted).isZero();
        // The granted writer is served.
        writer.connection(owner.localAddress()).write(b, T);
        TestPattern.assertPattern(pool, 0, size, 45);
        assertThat(ShmOwner.granted() - granted).isEqualTo(1);
        region.close();
        errors.removeIf(e -> e instanceof TransportException t && t.code() == ErrorCode.UNAUTHORIZED);
    }

    @Test
    void thePoolAndFenceFilesAreOwnerOnly() throws Exception {
        AeronConnectionManager owner = manager("owner", SECRET);
        MemoryBuffer pool = pool(1 << 20);
        RegisteredRegion region = owner.register(pool);
        Path file = Path.of(SharedMappings.find(pool.address(), pool.size()).file());
        assertThat(PosixFilePermissions.toString(Files.getPosixFilePermissions(file))).isEqualTo("rw-------");
        try (var s = Files.list(Path.of("/dev/shm"))) {
            List<Path> fences = s.filter(p -> p.getFileName().toString().startsWith(ShmFence.PREFIX
                    + ProcessHandle.current().pid() + "-")).toList();
            assertThat(fences).isNotEmpty().allSatisfy(p -> assertThat(
                    PosixFilePermissions.toString(Files.getPosixFilePermissions(p))).isEqualTo("rw-------"));
        }
        region.close();
        pool.close();
        assertThat(file).doesNotExist();
    }

    /**
     * A writer does not keep a closed owner's pool alive: once the owner's pool file is gone, the writer's next grant
     * hand-out unmaps it; writes to a new owner land as before.
     */
    @Test
    void aDeletedPoolFileIsUnmappedByTheWriter() {
        AeronConnectionManager writer = manager("writer", SECRET);
        AeronConnectionManager first = manager("first", SECRET);
        long size = 2L << 20;
        MemoryBuffer pool = pool(size);
        OffHeapBuffer src = buffer(size);
        TestPattern.fill(src, 0, size, 46);
        RegisteredRegion r1 = first.register(pool);
        writer.connection(first.localAddress()).write(new WriteBatch().add(src, 0, r1.descriptor(), 0, size), T);
        TestPattern.assertPattern(pool, 0, size, 46);
        ShmWriter w = writer.oneSided().writer();
        assertThat(w.mappedFiles()).isEqualTo(1);
        r1.close();
        first.close();
        pool.close();
        AeronConnectionManager second = manager("second", SECRET);
        MemoryBuffer pool2 = pool(size);
        RegisteredRegion r2 = second.register(pool2);
        TestPattern.fill(src, 0, size, 47);
        writer.connection(second.localAddress()).write(new WriteBatch().add(src, 0, r2.descriptor(), 0, size), T);
        TestPattern.assertPattern(pool2, 0, size, 47);
        assertThat(w.mappedFiles()).as("the first owner's deleted file is no longer mapped").isEqualTo(1);
        r2.close();
    }

    /**
     * A writer keeps writing a grant while the owner revokes it at a varying moment: after {@code close()} returned,
     * the pool never changes again, although the writer goes on trying with other bytes (each try refused
     * {@code CANCELLED}).
     */
    @Test
    void aRevokedGrantTakesNoLateByte() throws Exception {
        AeronConnectionManager owner = manager("owner", SECRET);
        AeronConnectionManager writer = manager("writer", SECRET);
        threads = Executors.newCachedThreadPool();
        long size = 4L << 20;
        MemoryBuffer pool = pool(size);
        OffHeapBuffer src = buffer(size);
        OffHeapBuffer snapshot = buffer(size);
        Connection c = writer.connection(owner.localAddress());
        for (int round = 0; round < 12; round++) {
            TestPattern.clear(pool, 0, size);
            RegisteredRegion region = owner.register(pool, Set.of(writer.localAddress()));
            AtomicInteger written = new AtomicInteger();
            AtomicInteger refused = new AtomicInteger();
            int r = round;
            Future<?> w = threads.submit(() -> {
                WriteBatch b = new WriteBatch();
                for (int i = 0; refused.get() < 3; i++) {
                    TestPattern.fill(src, 0, size, 1000L * r + i);
                    b.clear();
                    // Many small entries: the revocation lands between (and inside) them.
                    for (long off = 0; off < size; off += 16 << 10) {
                        b.add(src, off, region.descriptor(), off, 16 << 10);
                    }
                    try {
                        c.write(b, T);
                        written.incrementAndGet();
                    } catch (TransportException e) {
                        assertThat(e.code()).as("%s", e.getMessage()).isEqualTo(ErrorCode.CANCELLED);
                        refused.incrementAndGet();
                    }
                }
                return null;
            });
            int before = round % 4;
            await("writes before the revocation").atMost(T).pollInterval(Duration.ofMillis(1))
                    .until(() -> written.get() >= before);
            region.close();
            pools.copy(pool, 0, snapshot, 0, size);
            w.get(T.toSeconds(), TimeUnit.SECONDS);
            assertThat(refused.get()).isEqualTo(3);
            int changed = pool.asByteBuffer().mismatch(snapshot.asByteBuffer());
            assertThat(changed).as("round %d: first byte changed after the grant was revoked", round).isEqualTo(-1);
        }
        errors.removeIf(e -> e instanceof TransportException t && t.code() == ErrorCode.CANCELLED);
        assertThat(errors).isEmpty();
    }
}
