package dev.kvtransfer.core.journal;

/**
 * The record types of the journal format and the version each is written with. Every record is one Chronicle
 * document: {@code [type u8][version u8][monoNanos i64][wallNanos i64]} then the type's fields (see
 * {@link ChronicleTransferJournal}), little-endian.
 *
 * <p>Compatibility rules (the committed journals under {@code cli/src/test/resources/journal/} check them): a
 * type code is never reused; a new version of a type only <em>appends</em> fields; a reader skips (and counts)
 * types it does not know. Versions:
 * <ul>
 *   <li>1 (format 1): no per-record checksum. Still read; a flipped bit there cannot be told from a fact.</li>
 *   <li>2 (format 2, written now): every record ends with {@code crc32c i32}, the CRC32C of all its bytes before
 *       it (header included). A reader refuses a record whose checksum does not match, a record version it does
 *       not know, and a queue whose OPENED names a format it does not know: a journal from a newer version is an
 *       error that says so, never facts read with the wrong layout. (A single flipped bit cannot turn version 2
 *       into 1.)</li>
 * </ul>
 */
public enum RecordType {
    /** The journal of one rank was opened: identity of the rank and its cache state. */
    OPENED(1, 2),
    /** First contact with a peer instance: both cache states and the peer's addresses. */
    PEER_CONTACT(2, 2),
    /** The engine handed a request to this rank. */
    ACCEPTED(3, 2),
    /** Generation side: request info sent to a context rank. */
    INFO_SENT(4, 2),
    /** Context side: request info received from a generation rank. */
    INFO_RECEIVED(5, 2),
    /** Context side: ready signal sent. */
    READY_SENT(6, 2),
    /** Generation side: ready signal received. */
    READY_RECEIVED(7, 2),
    /** One payload part sent. */
    PART_SENT(8, 2),
    /** One payload part received. */
    PART_RECEIVED(9, 2),
    /** The request ended successfully on this rank. */
    COMPLETED(10, 2),
    /** The request ended with an error. */
    FAILED(11, 2),
    /** The request was cancelled. */
    CANCELLED(12, 2),
    /** The request ran past its deadline. */
    TIMED_OUT(13, 2),
    /** Events dropped because the journal's ring was full (the transfer never waits for the journal). */
    LOST(14, 2),
    /** The journal was closed cleanly. */
    CLOSED(15, 2);

    /** Version of the journal layout as a whole (directory layout and record header). */
    public static final int FORMAT_VERSION = 2;
    /** The first format whose records carry a CRC32C (record version 2). */
    public static final int FIRST_CHECKSUMMED_FORMAT = 2;
    /** Bytes of the record header: type u8, version u8, monoNanos i64, wallNanos i64. */
    static final int HEADER_BYTES = 18;
    /** Bytes of the trailing checksum of a version-2 record. */
    static final int CHECKSUM_BYTES = 4;

    private static final RecordType[] BY_CODE = new RecordType[256];

    static {
        for (RecordType t : values()) {
            BY_CODE[t.code] = t;
        }
    }

    private final int code;
    private final int version;

    RecordType(int code, int version) {
        this.code = code;
        this.version = version;
    }

    /** @return the type's byte on disk */
    public int code() {
        return code;
    }

    /** @return the version this code writes */
    public int version() {
        return version;
    }

    /**
     * @param code a type byte (0..255)
     * @return the type, or null when this version does not know it
     */
    public static RecordType byCode(int code) {
        return code < 0 || code > 255 ? null : BY_CODE[code];
    }
}
