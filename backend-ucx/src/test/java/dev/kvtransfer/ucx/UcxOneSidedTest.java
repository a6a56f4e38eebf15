package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.config;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Native one-sided writes ({@code ucx.oneSided=native}) beyond the conformance rules: quiescence of
 * {@code RegisteredRegion.close()} under a writer that keeps writing, writes from another process (the
 * notification after the bytes), and a killed owner ending a writer's write in bound — on the native path and on
 * the default ({@code auto}: emulated in shm mode), where the writer then serves a fresh peer.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxOneSidedTest {
    private final List<UcxConnectionManager> managers = new ArrayList<>();

    @AfterEach
    void tearDown() {
        for (UcxConnectionManager m : managers) {
            m.close();
        }
    }

    private static dev.kvtransfer.api.transport.TransportConfig nativeConfig(String name) {
        return config(name).toBuilder().property(UcxSettings.ONE_SIDED, "native").build();
    }

    private UcxConnectionManager manager(String name) {
        return manager(nativeConfig(name));
    }

    private UcxConnectionManager manager(dev.kvtransfer.api.transport.TransportConfig config) {
        UcxConnectionManager m = new UcxConnectionManager(config);
        managers.add(m);
        return m;
    }

    @Test
    void afterCloseReturnsNoWriteLandsAndTheWriterIsRefusedCancelled() throws Exception {
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        UcxConnectionManager owner = new UcxConnectionManager(nativeConfig("q-owner").toBuilder()
                .errorHandler(reported::add).build());
        managers.add(owner);
        UcxConnectionManager writer = manager("q-writer");
        long size = 256 * 1024;
        MemoryBuffer target = buffer(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 11);
        RegisteredRegion region = owner.register(target);
        RegionDescriptor d = region.descriptor();
        Connection toOwner = writer.connection(owner.localAddress());
        AtomicLong writes = new AtomicLong();
        CompletableFuture<TransportException> loop = CompletableFuture.supplyAsync(() -> {
            WriteBatch b = new WriteBatch();
            while (true) {
                b.clear();
                for (long off = 0; off < size; off += 64 * 1024) {
                    b.add(src, off, d, off, 64 * 1024);
                }
                try {
                    toOwner.write(b, Duration.ofSeconds(30));
                    writes.incrementAndGet();
                } catch (TransportException e) {
                    return e;
                }
            }
        });
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).until(() -> writes.get() >= 20);
        long t0 = System.nanoTime();
        region.close();
        long closeMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        // From here on the memory is the owner's again: mark it and watch for any late write.
        ByteBuffer t = target.asByteBuffer();
        for (int i = 0; i < size; i++) {
            t.put(i, (byte) 0x5A);
        }
        TransportException e = loop.get(60, TimeUnit.SECONDS);
        assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.CANCELLED);
        long after = writes.get();
        // One more round trip on the same connection, so anything still in flight would have landed by now.
        UcxTestSupport.exchange(writer, owner, 600, 3);
        for (int i = 0; i < size; i++) {
            if (t.get(i) != (byte) 0x5A) {
                throw new AssertionError("byte " + i + " of a closed region was written after close() returned");
            }
        }
        System.out.println("quiescence: close() returned after " + closeMs + " ms with a writer in a loop ("
                + after + " batches of 4 x 64 KiB written before); its next write: " + e.getMessage());
        // The owner reported the one refused re-validation, nothing else.
        assertThat(reported).allSatisfy(r -> assertThat(((TransportException) r).code()).isEqualTo(ErrorCode.CANCELLED));
    }

    @Test
    void aChildProcessWritesIntoOurRegionAndTheNotificationFollowsTheBytes() throws Exception {
        UcxConnectionManager parent = manager("x-owner");
        long size = (4L << 20) + 12;
        MemoryBuffer target = buffer(size);
        try (RegisteredRegion region = parent.register(target);
             UcxPeerMain.Child child = UcxPeerMain.fork("native")) {
            Connection c = parent.connection(child.address);
            WireWriter w = WireWriter.raw();
            region.descriptor().writeTo(w);
            byte[] raw = w.toByteArray();
            UcxCrossProcessTest.command(c, UcxPeerMain.WRITE, raw.length, 3, 700);
            MemoryBuffer m = buffer(raw.length);
            m.asByteBuffer().put(0, raw);
            c.send(UcxPeerMain.DATA_IN, m, 0, raw.length);
            MemoryBuffer st = buffer(8);
            c.recv(UcxPeerMain.STATUS, st, 0, 8, Duration.ofSeconds(60));
            assertThat(st.asByteBuffer().getLong(0)).as("child's write status").isEqualTo(1);
            // The status message was sent after the last write returned: the bytes are here.
            verify(target, 0, size, 702);
            UcxCrossProcessTest.command(c, UcxPeerMain.EXIT, 0, 0, 0);
        }
    }

    /**
     * A killed owner ends the writer's write in bound ({@code PEER_LOST}); on the default path the writer then
     * serves a fresh peer. On the native path the writer only closes in bound: UCX 1.13's shared-memory FIFO
     * (sysv/posix) is one ring per worker that every peer writes into; a peer killed between claiming a slot and
     * publishing it (the software-RMA completions it sends the writer) leaves that slot unpublished for ever, and
     * everything later peers put behind it is never read (the fresh peer's echo status that once did not arrive in
     * 30 s; see the README's "A killed peer can wedge the survivor's shared-memory FIFO").
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"native", "auto"})
    void aKilledOwnerEndsTheWritersWriteInBound(String oneSided) throws Exception {
        UcxConnectionManager writer = manager(config("k-writer").toBuilder().property(UcxSettings.ONE_SIDED, oneSided)
                .build());
        long size = 16L << 20;
        try (UcxPeerMain.Child owner = UcxPeerMain.fork(oneSided)) {
            Connection c = writer.connection(owner.address);
            UcxCrossProcessTest.command(c, UcxPeerMain.REGISTER, size, 0, 0);
            MemoryBuffer len = buffer(8);
            c.recv(UcxPeerMain.STATUS, len, 0, 8, Duration.ofSeconds(60));
            int n = (int) len.asByteBuffer().getLong(0);
            MemoryBuffer raw = buffer(n);
            c.recv(UcxPeerMain.DATA_OUT, raw, 0, n, Duration.ofSeconds(60));
            byte[] bytes = new byte[n];
            raw.asByteBuffer().get(0, bytes);
            RegionDescriptor d = RegionDescriptor.readFrom(WireReader.raw(bytes));
            MemoryBuffer src = buffer(size);
            fill(src, 0, size, 5);
            AtomicLong writes = new AtomicLong();
            CompletableFuture<TransportException> loop = CompletableFuture.supplyAsync(() -> {
                WriteBatch b = new WriteBatch().add(src, 0, d, 0, size);
                while (true) {
                    try {
                        c.write(b, Duration.ofSeconds(60));
                        writes.incrementAndGet();
                    } catch (TransportException e) {
                        return e;
                    }
                }
            });
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(60)).until(() -> writes.get() >= 3);
            owner.process.destroyForcibly();
            long t0 = System.nanoTime();
            TransportException e = loop.get(60, TimeUnit.SECONDS);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            System.out.println("killed owner (" + writer.settings().oneSidedReason() + "): the writer's write ended "
                    + ms + " ms after the kill (" + writes.get() + " x 16 MiB written before): " + e.getMessage());
            assertThat(e.code()).isIn(ErrorCode.PEER_LOST, ErrorCode.NETWORK);
            assertThat(ms).isLessThan(10_000);
        }
        if (oneSided.equals("native")) {
            // The survivor closes in bound (its close to the dead owner is not waited for).
            long t0 = System.nanoTime();
            writer.close();
            assertThat(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)).as("close after a killed owner")
                    .isLessThan(30_000);
            return;
        }
        // The writer keeps serving a fresh peer.
        try (UcxPeerMain.Child fresh = UcxPeerMain.fork(oneSided)) {
            try {
                UcxCrossProcessTest.echo(writer.connection(fresh.address), 4096, 2, 800);
            } catch (RuntimeException | AssertionError e) {
                throw new AssertionError("echo with a fresh child after the owner was killed failed; "
                        + fresh.diagnose(), e);
            }
        }
    }
}
