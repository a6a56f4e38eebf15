package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.RollCycles;
import net.openhft.chronicle.wire.DocumentContext;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

/**
 * Reads journals back into typed {@link JournalEvent}s: every rank's queue found under a directory (any
 * depth), or one queue. Works on the journal of a live or crashed process (a record being written when the
 * process died is not complete and is not returned). Records of types this version does not know are skipped
 * and counted ({@link Result#skipped()}); fields a newer version appended to a known type are ignored. A record
 * whose checksum fails, an unknown record version or format, and a file cut short are refused with a
 * {@link JournalCorruptedException} naming the file and saying what is wrong ({@link RecordType}).
 */
public final class JournalReader {
    static {
        System.setProperty("chronicle.analytics.disable", "true");
    }

    private static final Pattern DIR = Pattern.compile("(.+)-rank-(\\d+)");

    private JournalReader() {
    }

    /**
     * What was read.
     *
     * @param events  every event, ordered by wall-clock time (ties: source, then file order)
     * @param queues  the queue directories read, relative to the root
     * @param skipped records of unknown type or unreadable content
     */
    public record Result(List<JournalEvent> events, List<String> queues, long skipped) {
    }

    /**
     * Reads every rank's queue under a directory.
     *
     * @param root the journal directory of a run (or a single rank's queue directory)
     * @return the events
     * @throws IllegalArgumentException when no journal queue is found under root
     */
    public static Result readAll(Path root) {
        Objects.requireNonNull(root, "root");
        List<Path> dirs = queueDirectories(root);
        if (dirs.isEmpty()) {
            throw new IllegalArgumentException("no journal found under " + root + " (expected directories named "
                    + "<instance>-rank-<r> holding *.cq4 files)");
        }
        List<JournalEvent> events = new ArrayList<>();
        List<String> names = new ArrayList<>();
        long[] skipped = new long[1];
        for (Path d : dirs) {
            String rel = root.relativize(d).toString();
            names.add(rel.isEmpty() ? d.getFileName().toString() : rel);
            readQueue(d, rel.isEmpty() ? d.getFileName().toString() : rel, events, skipped);
        }
        List<JournalEvent> sorted = new ArrayList<>(events);
        // Stable sort: events of one rank keep their file order when wall-clock stamps tie.
        sorted.sort(Comparator.comparingLong(JournalEvent::wallNanos));
        return new Result(List.copyOf(sorted), List.copyOf(names), skipped[0]);
    }

    /**
     * @param root a directory
     * @return the queue directories under it (holding {@code *.cq4} files), sorted
     */
    public static List<Path> queueDirectories(Path root) {
        if (!Files.isDirectory(root)) {
            throw new IllegalArgumentException("not a directory: " + root);
        }
        try (Stream<Path> s = Files.walk(root)) {
            return s.filter(p -> p.getFileName().toString().endsWith(".cq4") && Files.isRegularFile(p))
                    .map(Path::getParent).distinct().sorted().toList();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list " + root, e);
        }
    }

    private static void readQueue(Path dir, String rel, List<JournalEvent> out, long[] skipped) {
        Matcher m = DIR.matcher(dir.getFileName().toString());
        JournalEvent.Source source = m.matches()
                ? new JournalEvent.Source(m.group(1), Integer.parseInt(m.group(2)), rel)
                : new JournalEvent.Source(dir.getFileName().toString(), -1, rel);
        Path file = checkFiles(dir);
        List<JournalEvent> mine = new ArrayList<>();
        CRC32C crc = new CRC32C();
        int format = -1; // this queue's, from its OPENED record
        long documents = 0;
        long lastRead = -1;
        try (ChronicleQueue q = ChronicleQueue.singleBuilder(dir).rollCycle(RollCycles.FAST_DAILY).readOnly(true)
                .build();
             ExcerptTailer tailer = q.createTailer()) {
            long lastWritten = q.lastIndex();
            while (true) {
                try (DocumentContext dc = tailer.readingDocument()) {
                    if (!dc.isPresent()) {
                        break;
                    }
                    if (!dc.isData()) {
                        continue;
                    }
                    documents++;
                    lastRead = dc.index();
                    Bytes<?> b = dc.wire().bytes();
                    long start = b.readPosition();
                    long end = b.readLimit();
                    int version = checkRecord(file, rel, documents, b, start, end, format, crc);
                    if (version >= 2) {
                        b.readLimit(end - RecordType.CHECKSUM_BYTES); // the fields end where the checksum starts
                    }
                    JournalEvent e;
                    try {
                        e = decode(source, b);
                    } catch (RuntimeException ex) {
                        throw new JournalCorruptedException(file, "record " + documents + " of " + rel
                                + " does not decode (" + ex + ")", ex);
                    }
                    if (e instanceof JournalEvent.Opened o) {
                        format = checkFormat(file, rel, documents, o.formatVersion(), version);
                    }
                    if (e == null) {
                        skipped[0]++; // a record type added by a newer version: kept out, counted
                    } else {
                        if (documents == 1 && !(e instanceof JournalEvent.Opened)) {
                            throw new JournalCorruptedException(file, "the first record of " + rel + " is "
                                    + e.type() + ", not the OPENED header every queue starts with", null);
                        }
                        if (e instanceof JournalEvent.Opened o && source.rank() < 0) {
                            source = new JournalEvent.Source(o.instance(), o.rank(), rel);
                        }
                        mine.add(e);
                    }
                }
            }
            if (lastWritten >= 0 && lastRead < lastWritten) {
                // The queue's index records entries the file no longer holds: it was cut short.
                throw new JournalCorruptedException(file, "its index lists records up to "
                        + Long.toHexString(lastWritten) + " but reading ended after " + Long.toHexString(lastRead)
                        + " (" + documents + " records of " + rel + " readable): truncated or overwritten", null);
            }
        } catch (JournalCorruptedException e) {
            throw e;
        } catch (InternalError e) {
            // A memory-mapped read past the end of the file faults; the JVM reports that as an InternalError about
            // "unsafe memory access", which tells a reader nothing: say what it means. The file was cut short, or
            // (found by fuzzing: one flipped byte of the queue's header does it) a damaged header points past it.
            throw new JournalCorruptedException(file, "the file ends inside its records: it was truncated after it"
                    + " was written, or a damaged header points past its end (" + documents + " records of " + rel
                    + " read before that)", e);
        } catch (Exception e) {
            // Chronicle rejects a bad document header; on a damaged store header it throws a checked
            // StreamCorruptedException without declaring it (found by fuzzing), hence Exception, not RuntimeException.
            throw new JournalCorruptedException(file, "reading " + rel + " failed after " + documents + " records ("
                    + e.getClass().getSimpleName() + ": " + e.getMessage() + ")", e);
        }
        if (mine.isEmpty()) {
            throw new JournalCorruptedException(file, "queue " + rel + " holds no readable record (every queue "
                    + "starts with an OPENED header): the file was emptied, truncated or overwritten", null);
        }
        out.addAll(mine);
    }

    /**
     * Checks the queue's files before Chronicle maps them: a file shorter than Chronicle's header, or not a
     * Chronicle queue file at all, is reported by name rather than mapped (a truncated map faults the JVM's
     * read).
     *
     * @return the queue's (first) data file, for error messages
     */
    private static Path checkFiles(Path dir) {
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.filter(p -> p.getFileName().toString().endsWith(".cq4")).sorted().toList();
        } catch (IOException e) {
            throw new JournalCorruptedException(dir, "cannot list it (" + e + ")", e);
        }
        for (Path f : files) {
            long size;
            byte[] head = new byte[8];
            try (var in = Files.newInputStream(f)) {
                size = Files.size(f);
                int n = in.readNBytes(head, 0, head.length);
                if (n < head.length) {
                    throw new JournalCorruptedException(f, "it holds " + size + " bytes, less than a queue header",
                            null);
                }
            } catch (IOException e) {
                throw new JournalCorruptedException(f, "cannot read it (" + e + ")", e);
            }
            if (size < MIN_QUEUE_FILE_BYTES) {
                throw new JournalCorruptedException(f, "it holds " + size + " bytes; a queue file as Chronicle "
                        + "writes it is at least " + MIN_QUEUE_FILE_BYTES + " (truncated?)", null);
            }
            if (!chronicleHeader(head)) {
                throw new JournalCorruptedException(f, "it does not start with a Chronicle Queue header", null);
            }
        }
        return files.isEmpty() ? dir : files.get(0);
    }

    /** Smallest size of a queue file Chronicle leaves behind (its header and index; files are pre-sized). */
    static final long MIN_QUEUE_FILE_BYTES = 64 * 1024;

    /**
     * A Chronicle wire file starts with a 4-byte document header (length and flags) whose metadata flag is set:
     * the queue's header document.
     */
    private static boolean chronicleHeader(byte[] head) {
        int h = (head[0] & 0xff) | (head[1] & 0xff) << 8 | (head[2] & 0xff) << 16 | (head[3] & 0xff) << 24;
        boolean metaData = (h & 0x4000_0000) != 0;
        int length = h & 0x3fff_ffff;
        return metaData && length > 0 && length < (1 << 20);
    }

    /**
     * Checks one record before anything is decoded from it: its version is one this reader knows and agrees with
     * the queue's format, and a version-2 record's CRC32C matches its bytes ({@link RecordType}).
     *
     * @param format the queue's format, or -1 before its OPENED record
     * @return the record's version
     */
    private static int checkRecord(Path file, String rel, long n, Bytes<?> b, long start, long end, int format,
                                   CRC32C crc) {
        if (end - start < RecordType.HEADER_BYTES) {
            throw new JournalCorruptedException(file, "record " + n + " of " + rel + " is " + (end - start)
                    + " bytes, shorter than a record header (" + RecordType.HEADER_BYTES + ")", null);
        }
        int version = b.readUnsignedByte(start + 1);
        if (version != 1 && version != 2) {
            throw new JournalCorruptedException(file, "record " + n + " of " + rel + " has version " + version
                    + "; this reader knows versions 1 and 2 (a journal of a newer kvtransfer, or damaged)", null);
        }
        if (format >= 0 && (format >= RecordType.FIRST_CHECKSUMMED_FORMAT) != (version >= 2)) {
            throw new JournalCorruptedException(file, "record " + n + " of " + rel + " has version " + version
                    + " in a queue of format " + format + " (spliced or damaged)", null);
        }
        if (version == 1) {
            return 1; // format 1 carries no checksum
        }
        if (end - start < RecordType.HEADER_BYTES + RecordType.CHECKSUM_BYTES) {
            throw new JournalCorruptedException(file, "record " + n + " of " + rel + " is " + (end - start)
                    + " bytes, too short for a header and its checksum", null);
        }
        int stored = b.readInt(end - RecordType.CHECKSUM_BYTES);
        int actual = ChronicleTransferJournal.crc32c(crc, b, start, end - RecordType.CHECKSUM_BYTES);
        if (stored != actual) {
            RecordType t = RecordType.byCode(b.readUnsignedByte(start));
            throw new JournalCorruptedException(file, "record " + n + " of " + rel + " (" + (t == null
                    ? "type " + b.readUnsignedByte(start) : t) + ") fails its checksum (CRC32C stored "
                    + Integer.toHexString(stored) + ", computed " + Integer.toHexString(actual) + "): its bytes were"
                    + " changed after it was written", null);
        }
        return version;
    }

    /** @return the queue's format, once its OPENED record named one this reader knows */
    private static int checkFormat(Path file, String rel, long n, int format, int version) {
        if (format != 1 && format != RecordType.FORMAT_VERSION) {
            throw new JournalCorruptedException(file, "queue " + rel + " is of format " + format + " (record " + n
                    + "); this reader knows formats 1 and " + RecordType.FORMAT_VERSION
                    + " (a journal of a newer kvtransfer, or damaged)", null);
        }
        if ((format >= RecordType.FIRST_CHECKSUMMED_FORMAT) != (version >= 2)) {
            throw new JournalCorruptedException(file, "queue " + rel + " says format " + format + " in a record of"
                    + " version " + version + " (damaged)", null);
        }
        return format;
    }

    /** Decodes one document; null when the type is unknown. */
    static JournalEvent decode(JournalEvent.Source src, Bytes<?> b) {
        RecordType type = RecordType.byCode(b.readUnsignedByte());
        b.readUnsignedByte(); // version: checked by checkRecord; later versions only append fields
        long mono = b.readLong();
        long wall = b.readLong();
        if (type == null) {
            return null;
        }
        return switch (type) {
            case OPENED -> {
                int format = b.readInt();
                String instance = b.readUtf8();
                int rank = b.readInt();
                long pid = b.readLong();
                String host = b.readUtf8();
                boolean checksums = b.readBoolean();
                CacheState self = CacheState.fromBytes(blob(b));
                yield new JournalEvent.Opened(src, mono, wall, format, instance, rank, pid, host, checksums, self);
            }
            case PEER_CONTACT -> {
                Role role = role(b.readUnsignedByte());
                long id = b.readLong();
                int peerRank = b.readInt();
                CacheState self = CacheState.fromBytes(blob(b));
                CacheState peer = CacheState.fromBytes(blob(b));
                String transport = b.readUtf8();
                int n = b.readInt();
                if (n < 0 || n > CacheState.MAX_PARALLELISM * 4) {
                    throw new IllegalStateException("bad address count " + n);
                }
                List<String> addresses = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    addresses.add(b.readUtf8());
                }
                yield new JournalEvent.PeerContact(src, mono, wall, role, id, peerRank, self, peer, transport,
                        List.copyOf(addresses));
            }
            case ACCEPTED -> {
                Role role = role(b.readUnsignedByte());
                long id = b.readLong();
                int prompt = b.readInt();
                int blocks = b.readInt();
                yield new JournalEvent.Accepted(src, mono, wall, role, id, prompt, blocks);
            }
            case INFO_SENT, INFO_RECEIVED -> new JournalEvent.RequestInfo(src, mono, wall,
                    type == RecordType.INFO_RECEIVED, b.readLong(), b.readInt());
            case READY_SENT, READY_RECEIVED -> new JournalEvent.ReadySignal(src, mono, wall,
                    type == RecordType.READY_RECEIVED, b.readLong(), b.readInt(), b.readBoolean());
            case PART_SENT, PART_RECEIVED -> new JournalEvent.Part(src, mono, wall, type == RecordType.PART_RECEIVED,
                    b.readLong(), b.readInt(), b.readLong(), b.readLong(), b.readLong());
            case COMPLETED -> new JournalEvent.Completed(src, mono, wall, role(b.readUnsignedByte()), b.readLong(),
                    b.readLong());
            case FAILED -> {
                Role role = role(b.readUnsignedByte());
                long id = b.readLong();
                String code = b.readUtf8();
                String message = b.readUtf8();
                yield new JournalEvent.Ended(src, mono, wall, type, role, id, errorCode(code), message);
            }
            case CANCELLED, TIMED_OUT -> {
                Role role = role(b.readUnsignedByte());
                long id = b.readLong();
                String message = b.readUtf8();
                yield new JournalEvent.Ended(src, mono, wall, type, role, id,
                        type == RecordType.CANCELLED ? ErrorCode.CANCELLED : ErrorCode.TIMEOUT, message);
            }
            case LOST -> new JournalEvent.Lost(src, mono, wall, b.readLong());
            case CLOSED -> new JournalEvent.Closed(src, mono, wall, b.readLong(), b.readLong());
        };
    }

    private static ErrorCode errorCode(String name) {
        for (ErrorCode c : ErrorCode.values()) {
            if (c.name().equals(name)) {
                return c;
            }
        }
        // A code added after this version: keep the event, with the closest meaning.
        return ErrorCode.INTERNAL;
    }

    private static Role role(int ordinal) {
        Role[] roles = Role.values();
        if (ordinal >= roles.length) {
            throw new IllegalStateException("unknown role " + ordinal);
        }
        return roles[ordinal];
    }

    private static byte[] blob(Bytes<?> b) {
        int n = b.readInt();
        if (n < 0 || n > b.readRemaining()) {
            throw new IllegalStateException("blob of " + n + " bytes, " + b.readRemaining() + " left");
        }
        byte[] out = new byte[n];
        b.read(out);
        return out;
    }
}
