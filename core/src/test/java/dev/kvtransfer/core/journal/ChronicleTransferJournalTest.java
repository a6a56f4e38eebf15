package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.zip.CRC32C;

import static org.assertj.core.api.Assertions.assertThat;

class ChronicleTransferJournalTest {
    @TempDir
    Path dir;

    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    private static CacheState ctxState() {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16).tensorParallelism(2)
                .build();
    }

    private static CacheState genState() {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16).pipelineParallelism(2)
                .build();
    }

    @Test
    void everyRecordTypeIsWrittenAndReadBack() {
        TransceiverState peer = new TransceiverState(genState(), new CommState("loopback", List.of("g0", "g1"), 1));
        try (ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "ctx", 1, ctxState(), true,
                errors::add)) {
            j.peerContact(Role.CONTEXT, 7, peer);
            j.peerContact(Role.CONTEXT, 8, peer); // same peer: not recorded again
            j.requestAccepted(Role.CONTEXT, 7, 100, 7);
            j.requestInfoSent(7, 0);
            j.requestInfoReceived(7, 1);
            j.readySignalSent(7, 1, true);
            j.readySignalReceived(7, 0, false);
            j.partSent(7, 1, 4096, 0xCAFEL, 1234);
            j.partReceived(7, 0, 512, TransferJournal.NO_CRC, 99);
            j.completed(Role.CONTEXT, 7, 4096);
            j.failed(Role.GENERATION, 9, ErrorCode.PEER_LOST, "peer went away");
            j.cancelled(Role.CONTEXT, 10, "by the engine");
            j.timedOut(Role.GENERATION, 11, "no ready signal");
            j.ended(Role.CONTEXT, 12, ErrorCode.TIMEOUT, "via ended");
        }
        JournalReader.Result r = JournalReader.readAll(dir);
        assertThat(errors).isEmpty();
        assertThat(r.skipped()).isZero();
        assertThat(r.queues()).containsExactly("ctx-rank-1");
        List<JournalEvent> ev = r.events();
        assertThat(ev).extracting(JournalEvent::type).containsExactly(RecordType.OPENED, RecordType.PEER_CONTACT,
                RecordType.ACCEPTED, RecordType.INFO_SENT, RecordType.INFO_RECEIVED, RecordType.READY_SENT,
                RecordType.READY_RECEIVED, RecordType.PART_SENT, RecordType.PART_RECEIVED, RecordType.COMPLETED,
                RecordType.FAILED, RecordType.CANCELLED, RecordType.TIMED_OUT, RecordType.TIMED_OUT,
                RecordType.CLOSED);
        for (JournalEvent e : ev) {
            assertThat(e.source()).isEqualTo(new JournalEvent.Source("ctx", 1, "ctx-rank-1"));
        }
        JournalEvent.Opened o = (JournalEvent.Opened) ev.get(0);
        assertThat(o.formatVersion()).isEqualTo(RecordType.FORMAT_VERSION);
        assertThat(o.instance()).isEqualTo("ctx");
        assertThat(o.rank()).isEqualTo(1);
        assertThat(o.pid()).isEqualTo(ProcessHandle.current().pid());
        assertThat(o.checksums()).isTrue();
        assertThat(o.selfState()).isEqualTo(ctxState());
        assertThat(ev.get(1)).isEqualTo(new JournalEvent.PeerContact(o.source(), ev.get(1).monoNanos(),
                ev.get(1).wallNanos(), Role.CONTEXT, 7, 1, ctxState(), genState(), "loopback", List.of("g0", "g1")));
        assertThat(ev.get(2)).isEqualTo(new JournalEvent.Accepted(o.source(), ev.get(2).monoNanos(),
                ev.get(2).wallNanos(), Role.CONTEXT, 7, 100, 7));
        assertThat(ev.get(3)).isEqualTo(new JournalEvent.RequestInfo(o.source(), ev.get(3).monoNanos(),
                ev.get(3).wallNanos(), false, 7, 0));
        assertThat(ev.get(4)).isEqualTo(new JournalEvent.RequestInfo(o.source(), ev.get(4).monoNanos(),
                ev.get(4).wallNanos(), true, 7, 1));
        assertThat(ev.get(5)).isEqualTo(new JournalEvent.ReadySignal(o.source(), ev.get(5).monoNanos(),
                ev.get(5).wallNanos(), false, 7, 1, true));
        assertThat(ev.get(6)).isEqualTo(new JournalEvent.ReadySignal(o.source(), ev.get(6).monoNanos(),
                ev.get(6).wallNanos(), true, 7, 0, false));
        assertThat(ev.get(7)).isEqualTo(new JournalEvent.Part(o.source(), ev.get(7).monoNanos(),
                ev.get(7).wallNanos(), false, 7, 1, 4096, 0xCAFEL, 1234));
        assertThat(((JournalEvent.Part) ev.get(8)).hasCrc()).isFalse();
        assertThat(ev.get(8)).isEqualTo(new JournalEvent.Part(o.source(), ev.get(8).monoNanos(),
                ev.get(8).wallNanos(), true, 7, 0, 512, TransferJournal.NO_CRC, 99));
        assertThat(ev.get(9)).isEqualTo(new JournalEvent.Completed(o.source(), ev.get(9).monoNanos(),
                ev.get(9).wallNanos(), Role.CONTEXT, 7, 4096));
        assertThat(ev.get(10)).isEqualTo(new JournalEvent.Ended(o.source(), ev.get(10).monoNanos(),
                ev.get(10).wallNanos(), RecordType.FAILED, Role.GENERATION, 9, ErrorCode.PEER_LOST, "peer went away"));
        assertThat(ev.get(11)).isEqualTo(new JournalEvent.Ended(o.source(), ev.get(11).monoNanos(),
                ev.get(11).wallNanos(), RecordType.CANCELLED, Role.CONTEXT, 10, ErrorCode.CANCELLED, "by the engine"));
        assertThat(ev.get(12)).isEqualTo(new JournalEvent.Ended(o.source(), ev.get(12).monoNanos(),
                ev.get(12).wallNanos(), RecordType.TIMED_OUT, Role.GENERATION, 11, ErrorCode.TIMEOUT,
                "no ready signal"));
        JournalEvent.Closed c = (JournalEvent.Closed) ev.get(14);
        assertThat(c.written()).isEqualTo(13);
        assertThat(c.lost()).isZero();
        // Monotonic order within the rank, and wall clock close to now.
        for (int i = 1; i < ev.size(); i++) {
            assertThat(ev.get(i).monoNanos()).isGreaterThanOrEqualTo(ev.get(i - 1).monoNanos());
        }
        long now = System.currentTimeMillis() * 1_000_000L;
        assertThat(ev.get(2).wallNanos()).isBetween(now - 60_000_000_000L, now + 1_000_000_000L);
    }

    @Test
    void aFullRingDropsEventsAndSaysSoInsteadOfBlocking() {
        ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "gen", 0, genState(), false, 2,
                ChronicleTransferJournal.DEFAULT_BLOCK_SIZE, errors::add);
        try {
            // Far more than 2 slots without waiting: some are dropped, none blocks.
            for (int i = 0; i < 10_000; i++) {
                j.partReceived(1, 0, i, TransferJournal.NO_CRC, 1);
            }
        } finally {
            j.close();
        }
        List<JournalEvent> ev = JournalReader.readAll(dir).events();
        long parts = ev.stream().filter(e -> e instanceof JournalEvent.Part).count();
        JournalEvent.Closed closed = (JournalEvent.Closed) ev.get(ev.size() - 1);
        assertThat(parts + closed.lost()).isEqualTo(10_000);
        if (closed.lost() > 0) {
            assertThat(ev).anyMatch(e -> e instanceof JournalEvent.Lost);
        }
        assertThat(errors).isEmpty();
    }

    @Test
    void noopRecordsNothing() {
        TransferJournal.NOOP.requestAccepted(Role.CONTEXT, 1, 1, 1);
        TransferJournal.NOOP.close();
        assertThat(TransferJournal.NOOP.enabled()).isFalse();
        assertThat(TransferJournal.NOOP.checksums()).isFalse();
    }

    /** What a checksummed part costs: CRC32C of off-heap memory through the ByteBuffer view. */
    @Test
    void crc32cThroughputOverOffHeapMemory() {
        long size = 64L << 20;
        try (HostBufferManager bm = new HostBufferManager();
             MemoryBuffer buf = bm.allocate(size, MemoryKind.HOST)) {
            // Real data in faulted-in pages (untouched pages would all read the kernel's one zero page).
            ByteBuffer bb = buf.asByteBuffer();
            for (int i = 0; i < size; i += 8) {
                bb.putLong(i, i * 0x9E3779B97F4A7C15L);
            }
            long crc = Checksums.crc32c(buf, 0, size); // warm-up
            long best = Long.MAX_VALUE;
            for (int i = 0; i < 5; i++) {
                long t0 = System.nanoTime();
                long c = Checksums.crc32c(buf, 0, size);
                best = Math.min(best, System.nanoTime() - t0);
                assertThat(c).isEqualTo(crc);
            }
            System.out.printf("crc32c of %d MiB off-heap: best %.2f GB/s%n", size >> 20, size / (double) best);
        }
    }

    @Test
    void crc32cOfOffHeapPayloadMatchesTheJdkOverTheSameBytes() {
        try (HostBufferManager bm = new HostBufferManager();
             MemoryBuffer buf = bm.allocate(1 << 16, MemoryKind.HOST)) {
            ByteBuffer bb = buf.asByteBuffer();
            for (int i = 0; i < bb.capacity(); i++) {
                bb.put(i, (byte) (i * 31 + 7));
            }
            byte[] copy = new byte[1000];
            bb.get(300, copy);
            CRC32C expected = new CRC32C();
            expected.update(copy);
            assertThat(Checksums.crc32c(buf, 300, 1000)).isEqualTo(expected.getValue());
            assertThat(Checksums.crc32c(buf.slice(300, 1000), 0, 1000)).isEqualTo(expected.getValue());
            assertThat(Checksums.crc32c(buf, 5, 0)).isEqualTo(new CRC32C().getValue());
        }
    }

    /**
     * Allocation per event on the transfer thread (must be 0: the ring slot is pre-allocated) and on the journal
     * thread (Chronicle's reused write context), by {@code ThreadMXBean#getThreadAllocatedBytes}.
     */
    @Test
    void hotPathEventsAllocateNothing() {
        com.sun.management.ThreadMXBean mx = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        assertThat(mx.isThreadAllocatedMemorySupported()).isTrue();
        mx.setThreadAllocatedMemoryEnabled(true);
        try (ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "ctx", 0, ctxState(), true,
                errors::add)) {
            long self = Thread.currentThread().getId();
            long journalThread = j.journalThread().getId();
            int batch = 2_000; // 12 000 events, below the ring's capacity: none is lost
            int batches = 20;
            Duration wait = Duration.ofSeconds(30);
            // Warm-up: JIT, the queue's first block, the wall-clock calibration.
            for (int round = 0; round < 20; round++) {
                emit(j, batch);
                assertThat(j.awaitWritten(wait)).isTrue();
            }
            long producerBytes = 0;
            long producerNanos = 0;
            long journalBefore = mx.getThreadAllocatedBytes(journalThread);
            long t0 = System.nanoTime();
            for (int round = 0; round < batches; round++) {
                long before = mx.getThreadAllocatedBytes(self);
                long e0 = System.nanoTime();
                emit(j, batch);
                producerNanos += System.nanoTime() - e0;
                producerBytes += mx.getThreadAllocatedBytes(self) - before;
                assertThat(j.awaitWritten(wait)).isTrue();
            }
            long elapsed = System.nanoTime() - t0;
            long journalAfter = mx.getThreadAllocatedBytes(journalThread);
            assertThat(j.lostEvents()).isZero();
            int n = batch * batches;
            int events = n * 6;
            double producer = producerBytes / (double) events;
            double consumer = (journalAfter - journalBefore) / (double) events;
            System.out.printf("journal allocation: transfer thread %.4f B/event, journal thread %.4f B/event"
                    + " (%d events); transfer thread %.1f ns/event; written at %.2f M events/s%n", producer,
                    consumer, events, producerNanos / (double) events, events / (elapsed / 1e9) / 1e6);
            // getThreadAllocatedBytes itself may allocate a few bytes per call; nothing per event.
            assertThat(producer).isLessThan(0.1);
            assertThat(consumer).isLessThan(1.0);
        }
        assertThat(errors).isEmpty();
    }

    private static void emit(TransferJournal j, int n) {
        for (int i = 0; i < n; i++) {
            j.requestAccepted(Role.CONTEXT, i, 4096, 128);
            j.requestInfoReceived(i, 0);
            j.readySignalSent(i, 0, true);
            j.partSent(i, 0, 1 << 20, 0x1234_5678L, 5000);
            j.partReceived(i, 0, 1 << 20, 0x1234_5678L, 5000);
            j.completed(Role.CONTEXT, i, 1 << 20);
        }
    }

    @Test
    void eventsFromManyThreadsAllArrive() throws Exception {
        int threads = 4;
        int per = 5_000;
        try (ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "gen", 3, genState(), false,
                errors::add)) {
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int peer = t;
                Thread th = new Thread(() -> {
                    for (int i = 0; i < per; i++) {
                        j.partReceived(i, peer, i, TransferJournal.NO_CRC, 1);
                    }
                });
                ts.add(th);
                th.start();
            }
            for (Thread th : ts) {
                th.join(30_000);
                assertThat(th.isAlive()).isFalse();
            }
            assertThat(j.lostEvents()).isZero();
        }
        List<JournalEvent> ev = JournalReader.readAll(dir).events();
        for (int t = 0; t < threads; t++) {
            int peer = t;
            List<Long> bytes = ev.stream().filter(e -> e instanceof JournalEvent.Part p && p.peerRank() == peer)
                    .map(e -> ((JournalEvent.Part) e).bytes()).toList();
            // Per producer thread, file order is program order.
            assertThat(bytes).hasSize(per);
            for (int i = 0; i < per; i++) {
                assertThat(bytes.get(i)).isEqualTo(i);
            }
        }
    }
}
