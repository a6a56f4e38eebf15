package dev.kvtransfer.core.journal;

/**
 * The record types of the journal format and the version each is written with. Every record is one Chronicle
 * document: {@code [type u8][version u8][monoNanos i64][wallNanos i64]} then the type's fields (see
 * {@link ChronicleTransferJournal}), little-endian.
 *
 * <p>Compatibility rules (the committed journals under {@code cli/src/test/resources/journal/} check them): a
 * type code is never reused; a new version of a type only <em>appends</em> fields, so a reader reads the fields
 * it knows and skips the rest of the document; a reader skips (and counts) types it does not know.
 */
public enum RecordType {
    /** The journal of one rank was opened: identity of the rank and its cache state. */
    OPENED(1, 1),
    /** First contact with a peer instance: both cache states and the peer's addresses. */
    PEER_CONTACT(2, 1),
    /** The engine handed a request to this rank. */
    ACCEPTED(3, 1),
    /** Generation side: request info sent to a context rank. */
    INFO_SENT(4, 1),
    /** Context side: request info received from a generation rank. */
    INFO_RECEIVED(5, 1),
    /** Context side: ready signal sent. */
    READY_SENT(6, 1),
    /** Generation side: ready signal received. */
    READY_RECEIVED(7, 1),
    /** One payload part sent. */
    PART_SENT(8, 1),
    /** One payload part received. */
    PART_RECEIVED(9, 1),
    /** The request ended successfully on this rank. */
    COMPLETED(10, 1),
    /** The request ended with an error. */
    FAILED(11, 1),
    /** The request was cancelled. */
    CANCELLED(12, 1),
    /** The request ran past its deadline. */
    TIMED_OUT(13, 1),
    /** Events dropped because the journal's ring was full (the transfer never waits for the journal). */
    LOST(14, 1),
    /** The journal was closed cleanly. */
    CLOSED(15, 1);

    /** Version of the journal layout as a whole (directory layout and record header). */
    public static final int FORMAT_VERSION = 1;

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
