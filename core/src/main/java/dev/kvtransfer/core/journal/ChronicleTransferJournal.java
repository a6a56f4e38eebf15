package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.ErrorHandler;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.RollCycles;
import net.openhft.chronicle.wire.DocumentContext;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

/**
 * A {@link TransferJournal} that writes one Chronicle Queue per rank, under
 * {@code <root>/<instance>-rank-<rank>/}.
 *
 * <p><b>Off the critical path.</b> A transfer thread never touches Chronicle: it claims a pre-allocated slot
 * of a lock-free ring ({@link EventRing}, one CAS), fills a few primitive fields and publishes it. One journal
 * thread per rank drains the ring into the queue through the appender's reused {@link DocumentContext}
 * ({@code writingDocument()}). So the transfer threads share no lock with Chronicle (whose appenders serialise
 * on the queue's write lock), do no I/O, and allocate nothing per event; a full ring drops the event (counted,
 * written later as a {@link RecordType#LOST} record) rather than make a transfer wait. Timestamps: the producer
 * stamps {@code System.nanoTime()}; the journal thread derives the wall clock from it with one JVM-wide offset
 * ({@link WallClock}, re-calibrated once a second), so events of all ranks of a process order exactly and no
 * {@code Instant} is made per event.
 *
 * <p><b>Format.</b> Each event is one document: {@code type u8, version u8, monoNanos i64, wallNanos i64},
 * then, by {@link RecordType}:
 * <pre>
 * OPENED         formatVersion i32, instance utf8, rank i32, pid i64, host utf8, checksums bool, selfState blob
 * PEER_CONTACT   role u8, requestId i64, peerRank i32, selfState blob, peerState blob, transport utf8,
 *                addresses (count i32, utf8...)
 * ACCEPTED       role u8, requestId i64, promptLength i32, blockCount i32
 * INFO_SENT, INFO_RECEIVED            requestId i64, peerRank i32
 * READY_SENT, READY_RECEIVED          requestId i64, peerRank i32, value bool
 * PART_SENT, PART_RECEIVED            requestId i64, peerRank i32, bytes i64, crc32c i64 (-1 = none), durationNanos i64
 * COMPLETED      role u8, requestId i64, bytes i64
 * FAILED         role u8, requestId i64, code utf8, message utf8
 * CANCELLED, TIMED_OUT                role u8, requestId i64, message utf8
 * LOST           count i64 (total dropped so far)
 * CLOSED         written i64, lost i64
 * </pre>
 * A blob is {@code length i32} + bytes ({@code CacheState.toBytes()}, itself versioned by the api). Every
 * record (format 2) ends with {@code crc32c i32} over all its bytes before it: a flipped bit anywhere in a record
 * is reported, never read as a different fact. Roll cycle: {@link RollCycles#FAST_DAILY}.
 */
public final class ChronicleTransferJournal implements TransferJournal {
    static {
        // Chronicle must never call home; set before any Chronicle class initialises (the launchers set it too).
        System.setProperty("chronicle.analytics.disable", "true");
    }

    /** Default ring capacity (events). */
    public static final int DEFAULT_RING_CAPACITY = 1 << 16;
    /** Default Chronicle block size: small, because a journal file is mapped and grown in blocks of this size. */
    public static final long DEFAULT_BLOCK_SIZE = 4L << 20;
    private static final Duration CLOSE_WAIT = Duration.ofSeconds(10);
    /**
     * Nap of the journal thread when the ring is empty. A journal has no latency to keep, and on a machine with
     * few cores a journal thread that spins or yields takes CPU from the transfer threads; 1 ms naps cost ~1000
     * wake-ups/s and the ring absorbs what arrives meanwhile (65 536 events by default).
     */
    private static final long IDLE_PARK_NANOS = 1_000_000;

    private final Path directory;
    private final String instance;
    private final int rank;
    private final CacheState selfState;
    private final boolean checksums;
    private final ErrorHandler errors;
    private final ChronicleQueue queue;
    private final EventRing ring;
    private final AtomicLong lost = new AtomicLong();
    private final Map<CommState, Boolean> peersSeen = new ConcurrentHashMap<>();
    private final Thread thread;
    private volatile long consumed;
    private volatile boolean closing;
    private volatile boolean closed;
    private long written;
    private long lostWritten;
    private final long openedMono;

    private ChronicleTransferJournal(Path root, String instance, int rank, CacheState selfState, boolean checksums,
                                     int ringCapacity, long blockSize, ErrorHandler errors) {
        this.instance = Objects.requireNonNull(instance, "instance");
        this.selfState = Objects.requireNonNull(selfState, "selfState");
        this.errors = Objects.requireNonNull(errors, "errors");
        this.rank = rank;
        this.checksums = checksums;
        this.directory = root.resolve(directoryName(instance, rank));
        try {
            Files.createDirectories(root);
            ownerOnly(directory);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create the journal directory " + directory, e);
        }
        this.queue = ChronicleQueue.singleBuilder(directory).rollCycle(RollCycles.FAST_DAILY).blockSize(blockSize)
                .build();
        this.ring = new EventRing(ringCapacity);
        // Stamped here, before any event can be, so OPENED is the first record in time as well as in the file.
        this.openedMono = System.nanoTime();
        this.thread = new Thread(this::run, "kvt-journal-" + instance + "-rank-" + rank);
        thread.setDaemon(true);
        thread.start();
    }

    /**
     * Opens (or appends to) the journal of one rank, with the default ring and block size.
     *
     * @param root      the journal directory of the run (every rank's queue is a subdirectory)
     * @param instance  the instance name, e.g. {@code ctx}
     * @param rank      the rank's index in its instance
     * @param selfState the rank's cache state
     * @param checksums whether parts carry a CRC32C of their payload
     * @param errors    receives write failures of the journal thread
     * @return the journal
     */
    public static ChronicleTransferJournal open(Path root, String instance, int rank, CacheState selfState,
                                                boolean checksums, ErrorHandler errors) {
        return open(root, instance, rank, selfState, checksums, DEFAULT_RING_CAPACITY, DEFAULT_BLOCK_SIZE, errors);
    }

    /**
     * Opens (or appends to) the journal of one rank.
     *
     * @param root         the journal directory of the run
     * @param instance     the instance name
     * @param rank         the rank's index in its instance
     * @param selfState    the rank's cache state
     * @param checksums    whether parts carry a CRC32C of their payload
     * @param ringCapacity events buffered between the transfer threads and the journal thread (power of two)
     * @param blockSize    Chronicle block size in bytes
     * @param errors       receives write failures of the journal thread
     * @return the journal
     */
    public static ChronicleTransferJournal open(Path root, String instance, int rank, CacheState selfState,
                                                boolean checksums, int ringCapacity, long blockSize,
                                                ErrorHandler errors) {
        Objects.requireNonNull(root, "root");
        if (rank < 0) {
            throw new IllegalArgumentException("rank = " + rank + ": must be >= 0");
        }
        if (instance.isEmpty() || instance.contains("/") || instance.contains("\\")) {
            throw new IllegalArgumentException("instance name '" + instance + "' cannot name a directory");
        }
        return new ChronicleTransferJournal(root, instance, rank, selfState, checksums, ringCapacity, blockSize,
                errors);
    }

    /**
     * Creates (or tightens) a rank's queue directory as {@code 0700}: Chronicle creates its files with the process
     * umask (usually world readable), and a journal holds request ids, sizes, timings, checksums and peer
     * addresses; the directory's mode keeps every file in it, also those Chronicle creates later, from other uids.
     * Best effort on a file system without POSIX permissions.
     */
    private static void ownerOnly(Path dir) throws IOException {
        var mode = java.nio.file.attribute.PosixFilePermissions.fromString("rwx------");
        try {
            if (!Files.isDirectory(dir)) {
                Files.createDirectory(dir, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(mode));
            }
            Files.setPosixFilePermissions(dir, mode);
        } catch (UnsupportedOperationException e) {
            Files.createDirectories(dir);
        } catch (java.nio.file.FileAlreadyExistsException e) {
            Files.setPosixFilePermissions(dir, mode); // another rank's thread made it meanwhile
        }
    }

    /**
     * @param instance instance name
     * @param rank     rank index
     * @return the name of the rank's queue directory under the journal root
     */
    public static String directoryName(String instance, int rank) {
        return instance + "-rank-" + rank;
    }

    /** @return this rank's queue directory */
    public Path directory() {
        return directory;
    }

    @Override
    public boolean enabled() {
        return !closed;
    }

    @Override
    public boolean checksums() {
        return checksums;
    }

    /** @return events dropped because the ring was full */
    public long lostEvents() {
        return lost.get();
    }

    /** @return the journal thread (tests measure its allocation) */
    Thread journalThread() {
        return thread;
    }

    // ---------------------------------------------------------------- producers (transfer threads)

    private EventRing.Slot claim(RecordType type) {
        if (closing) {
            return null;
        }
        EventRing.Slot s = ring.claim();
        if (s == null) {
            lost.incrementAndGet();
            return null;
        }
        s.type = type;
        s.monoNanos = System.nanoTime();
        return s;
    }

    private void put(RecordType type, TransferJournal.Role role, long requestId, int peerRank, long a, long b, long c,
                     Object ref) {
        EventRing.Slot s = claim(type);
        if (s == null) {
            return;
        }
        s.role = role;
        s.requestId = requestId;
        s.peerRank = peerRank;
        s.a = a;
        s.b = b;
        s.c = c;
        s.ref = ref;
        ring.publish(s);
    }

    @Override
    public void peerContact(Role role, long requestId, TransceiverState peer) {
        if (peer == null || peersSeen.containsKey(peer.commState())) {
            return;
        }
        if (peersSeen.putIfAbsent(peer.commState(), Boolean.TRUE) == null) {
            put(RecordType.PEER_CONTACT, role, requestId, peer.selfIndex(), 0, 0, 0, peer);
        }
    }

    @Override
    public void requestAccepted(Role role, long requestId, int promptLength, int blockCount) {
        put(RecordType.ACCEPTED, role, requestId, -1, promptLength, blockCount, 0, null);
    }

    @Override
    public void requestInfoSent(long requestId, int peerRank) {
        put(RecordType.INFO_SENT, Role.GENERATION, requestId, peerRank, 0, 0, 0, null);
    }

    @Override
    public void requestInfoReceived(long requestId, int peerRank) {
        put(RecordType.INFO_RECEIVED, Role.CONTEXT, requestId, peerRank, 0, 0, 0, null);
    }

    @Override
    public void readySignalSent(long requestId, int peerRank, boolean value) {
        put(RecordType.READY_SENT, Role.CONTEXT, requestId, peerRank, value ? 1 : 0, 0, 0, null);
    }

    @Override
    public void readySignalReceived(long requestId, int peerRank, boolean value) {
        put(RecordType.READY_RECEIVED, Role.GENERATION, requestId, peerRank, value ? 1 : 0, 0, 0, null);
    }

    @Override
    public void partSent(long requestId, int peerRank, long bytes, long crc32c, long durationNanos) {
        put(RecordType.PART_SENT, Role.CONTEXT, requestId, peerRank, bytes, crc32c, durationNanos, null);
    }

    @Override
    public void partReceived(long requestId, int peerRank, long bytes, long crc32c, long durationNanos) {
        put(RecordType.PART_RECEIVED, Role.GENERATION, requestId, peerRank, bytes, crc32c, durationNanos, null);
    }

    @Override
    public void completed(Role role, long requestId, long bytes) {
        put(RecordType.COMPLETED, role, requestId, -1, bytes, 0, 0, null);
    }

    @Override
    public void failed(Role role, long requestId, ErrorCode code, String message) {
        put(RecordType.FAILED, role, requestId, -1, code == null ? -1 : code.ordinal(), 0, 0,
                message == null ? "" : message);
    }

    @Override
    public void cancelled(Role role, long requestId, String message) {
        put(RecordType.CANCELLED, role, requestId, -1, 0, 0, 0, message == null ? "" : message);
    }

    @Override
    public void timedOut(Role role, long requestId, String message) {
        put(RecordType.TIMED_OUT, role, requestId, -1, 0, 0, 0, message == null ? "" : message);
    }

    // ---------------------------------------------------------------- journal thread

    private void run() {
        ExcerptAppender appender = null;
        try {
            appender = queue.createAppender();
            writeOpened(appender);
            while (true) {
                int n = drain(appender, 1024);
                if (n > 0) {
                    continue;
                }
                if (lost.get() != lostWritten) {
                    writeLost(appender);
                }
                if (closing && consumed == ring.claimedCount()) {
                    break;
                }
                LockSupport.parkNanos(IDLE_PARK_NANOS);
            }
            writeClosed(appender);
        } catch (Throwable e) {
            errors.onError(new IllegalStateException("journal of " + instance + " rank " + rank + " in "
                    + directory + " stopped writing: " + e, e));
            // Keep consuming so producers see a draining ring, not a full one, until close.
            while (!closing || consumed != ring.claimedCount()) {
                EventRing.Slot s = ring.peek();
                if (s == null) {
                    LockSupport.parkNanos(1_000_000);
                    continue;
                }
                ring.release(s);
                consumed = consumed + 1;
            }
        } finally {
            if (appender != null) {
                try {
                    appender.close();
                } catch (RuntimeException e) {
                    errors.onError(e);
                }
            }
        }
    }

    private int drain(ExcerptAppender appender, int max) {
        int n = 0;
        EventRing.Slot s;
        while (n < max && (s = ring.peek()) != null) {
            try {
                write(appender, s);
                written++;
            } catch (RuntimeException e) {
                errors.onError(new IllegalStateException("journal of " + instance + " rank " + rank
                        + ": could not write a " + s.type + " record of request " + s.requestId + ": " + e, e));
            } finally {
                ring.release(s);
                consumed = consumed + 1;
            }
            n++;
        }
        return n;
    }

    /** Journal thread only: reused for every record's checksum (journaling allocates nothing per event). */
    private final CRC32C recordCrc = new CRC32C();

    /** @return where the record starts, for {@link #seal} */
    private static long header(Bytes<?> b, RecordType type, long mono) {
        long start = b.writePosition();
        b.writeUnsignedByte(type.code());
        b.writeUnsignedByte(type.version());
        b.writeLong(mono);
        b.writeLong(WallClock.wallNanos(mono));
        return start;
    }

    /** Ends a record with the CRC32C of its bytes (format 2; {@link RecordType}). */
    private void seal(Bytes<?> b, long start) {
        b.writeInt(crc32c(recordCrc, b, start, b.writePosition()));
    }

    /**
     * The CRC32C of {@code b[start, end)} as a journal record's checksum (the writer and {@link JournalReader}).
     *
     * @param crc a CRC32C to reuse (reset here)
     */
    static int crc32c(CRC32C crc, Bytes<?> b, long start, long end) {
        crc.reset();
        for (long i = start; i < end; i++) {
            crc.update(b.readUnsignedByte(i));
        }
        return (int) crc.getValue();
    }

    private void write(ExcerptAppender appender, EventRing.Slot s) {
        try (DocumentContext dc = appender.writingDocument()) {
            Bytes<?> b = dc.wire().bytes();
            long start = header(b, s.type, s.monoNanos);
            switch (s.type) {
                case PEER_CONTACT -> {
                    TransceiverState peer = (TransceiverState) s.ref;
                    b.writeUnsignedByte(s.role.ordinal());
                    b.writeLong(s.requestId);
                    b.writeInt(s.peerRank);
                    blob(b, selfState.toBytes());
                    blob(b, peer.cacheState().toBytes());
                    b.writeUtf8(peer.commState().transport());
                    b.writeInt(peer.commState().addresses().size());
                    for (String a : peer.commState().addresses()) {
                        b.writeUtf8(a);
                    }
                }
                case ACCEPTED -> {
                    b.writeUnsignedByte(s.role.ordinal());
                    b.writeLong(s.requestId);
                    b.writeInt((int) s.a);
                    b.writeInt((int) s.b);
                }
                case INFO_SENT, INFO_RECEIVED -> {
                    b.writeLong(s.requestId);
                    b.writeInt(s.peerRank);
                }
                case READY_SENT, READY_RECEIVED -> {
                    b.writeLong(s.requestId);
                    b.writeInt(s.peerRank);
                    b.writeBoolean(s.a != 0);
                }
                case PART_SENT, PART_RECEIVED -> {
                    b.writeLong(s.requestId);
                    b.writeInt(s.peerRank);
                    b.writeLong(s.a);
                    b.writeLong(s.b);
                    b.writeLong(s.c);
                }
                case COMPLETED -> {
                    b.writeUnsignedByte(s.role.ordinal());
                    b.writeLong(s.requestId);
                    b.writeLong(s.a);
                }
                case FAILED -> {
                    b.writeUnsignedByte(s.role.ordinal());
                    b.writeLong(s.requestId);
                    b.writeUtf8(s.a < 0 ? "" : ErrorCode.values()[(int) s.a].name());
                    b.writeUtf8((String) s.ref);
                }
                case CANCELLED, TIMED_OUT -> {
                    b.writeUnsignedByte(s.role.ordinal());
                    b.writeLong(s.requestId);
                    b.writeUtf8((String) s.ref);
                }
                default -> throw new IllegalStateException("not a producer record: " + s.type);
            }
            seal(b, start);
        }
    }

    private static void blob(Bytes<?> b, byte[] bytes) {
        b.writeInt(bytes.length);
        b.write(bytes);
    }

    private void writeOpened(ExcerptAppender appender) {
        try (DocumentContext dc = appender.writingDocument()) {
            Bytes<?> b = dc.wire().bytes();
            long start = header(b, RecordType.OPENED, openedMono);
            b.writeInt(RecordType.FORMAT_VERSION);
            b.writeUtf8(instance);
            b.writeInt(rank);
            b.writeLong(ProcessHandle.current().pid());
            b.writeUtf8(hostName());
            b.writeBoolean(checksums);
            blob(b, selfState.toBytes());
            seal(b, start);
        }
    }

    private void writeLost(ExcerptAppender appender) {
        long n = lost.get();
        try (DocumentContext dc = appender.writingDocument()) {
            Bytes<?> b = dc.wire().bytes();
            long start = header(b, RecordType.LOST, System.nanoTime());
            b.writeLong(n);
            seal(b, start);
        }
        lostWritten = n;
    }

    private void writeClosed(ExcerptAppender appender) {
        try (DocumentContext dc = appender.writingDocument()) {
            Bytes<?> b = dc.wire().bytes();
            long start = header(b, RecordType.CLOSED, System.nanoTime());
            b.writeLong(written);
            b.writeLong(lost.get());
            seal(b, start);
        }
    }

    private static String hostName() {
        String h = System.getenv("HOSTNAME");
        if (h != null && !h.isEmpty()) {
            return h;
        }
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "unknown";
        }
    }

    // ---------------------------------------------------------------- lifecycle

    /**
     * Waits until every event recorded before this call is written to the queue.
     *
     * @param timeout how long to wait at most
     * @return true when written
     */
    public boolean awaitWritten(Duration timeout) {
        long target = ring.claimedCount();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (consumed < target) {
            if (System.nanoTime() - deadline > 0 || !thread.isAlive()) {
                return consumed >= target;
            }
            LockSupport.parkNanos(200_000);
        }
        return true;
    }

    /**
     * Writes what is buffered, a {@link RecordType#CLOSED} record, and closes the queue. Idempotent.
     *
     * @throws IllegalStateException when the journal thread did not finish within 10 s (the queue is then left
     *                               open; its thread is a daemon)
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closing = true;
        try {
            thread.join(CLOSE_WAIT.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) {
            throw new IllegalStateException("journal thread " + thread.getName() + " still writing after "
                    + CLOSE_WAIT.toSeconds() + " s (" + (ring.claimedCount() - consumed) + " events left)");
        }
        closed = true;
        queue.close();
    }

    @Override
    public String toString() {
        return "ChronicleTransferJournal{" + directory + ", checksums=" + checksums + "}";
    }
}
