package dev.kvtransfer.api.transport;

/**
 * Message tags of the transfer protocol. Control tags are fixed; payload travels on a per-transfer data tag
 * chosen by the requester, at least {@link #FIRST_DATA_TAG}, carried in the {@code RequestInfo}.
 */
public final class Tags {
    /** Request id message: a little-endian uint64, {@link #REQUEST_SEND} or {@link #TERMINATION}. */
    public static final int ID_TAG = 19;
    /** Size of the following request info, a little-endian uint64. */
    public static final int INFO_SIZE_TAG = 22;
    /**
     * The encoded {@code RequestInfo}, in the protocol before each info moved to its request's data tag (the request
     * header names it). Core no longer sends or reads this tag; kept so that plugins built against it still link.
     *
     * @deprecated request infos travel on their request's data tag
     */
    @Deprecated
    public static final int INFO_TAG = 32;
    /** The context side's one-byte ready signal: 1 = data follows, 0 = cancelled/refused. */
    public static final int READY_SIGNAL_TAG = 42;
    /** Why a ready signal was 0: an encoded UTF-8 reason, sent right after a 0 ready signal. */
    public static final int REASON_TAG = 43;
    /** Emulated one-sided writes: a batch request (fixed header), writer to owner. */
    public static final int RMA_REQUEST_TAG = 60;
    /** Emulated one-sided writes: the batch's entries (region, key, offset, length), writer to owner. */
    public static final int RMA_ENTRIES_TAG = 61;
    /** Emulated one-sided writes: the owner's replies (go / refused / done), owner to writer. */
    public static final int RMA_REPLY_TAG = 62;
    /** Emulated one-sided writes: the entries' bytes, one message per entry, writer to owner. */
    public static final int RMA_DATA_TAG = 63;
    /** Smallest data tag; data tags are in {@code [FIRST_DATA_TAG, Integer.MAX_VALUE]}. */
    public static final int FIRST_DATA_TAG = 1 << 10;

    /** Id value: a generation rank asks for a request's cache. */
    public static final long REQUEST_SEND = 1;
    /** Id value: stop the responder (used on shutdown). */
    public static final long TERMINATION = 2;

    private Tags() {
    }
}
