package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.TransceiverState;

/**
 * What one rank's transfer protocol tells its journal (DESIGN §7): every call records one event, stamped by
 * the journal with {@code System.nanoTime()} (monotonic) and the wall clock. {@link #NOOP} is the journal when
 * journaling is off; {@link ChronicleTransferJournal} writes a Chronicle Queue.
 *
 * <p>Contract for implementations: the calls are made on the transfer threads themselves, so they must return
 * quickly, never block on I/O, never throw, and — for every call but {@link #peerContact}, {@link #failed},
 * {@link #cancelled} and {@link #timedOut}, which carry objects that already exist — allocate nothing. A
 * caller computes a CRC32C only when {@link #checksums()} is true (see {@link Checksums}).
 *
 * <p>Peer ranks are rank indexes inside the peer instance; {@code -1} means "not one rank" (e.g. a request
 * that failed before its counterparts were known).
 */
public interface TransferJournal extends AutoCloseable {
    /** CRC value recorded when no checksum was computed. */
    long NO_CRC = -1L;

    /** Which side of a transfer an event belongs to. */
    enum Role {
        /** The context (prefill, sending) side. */
        CONTEXT,
        /** The generation (decode, receiving) side. */
        GENERATION
    }

    /** The journal that records nothing; {@link #enabled()} and {@link #checksums()} are false. */
    TransferJournal NOOP = new TransferJournal() {
        @Override
        public boolean enabled() {
            return false;
        }

        @Override
        public boolean checksums() {
            return false;
        }

        @Override
        public void peerContact(Role role, long requestId, TransceiverState peer) {
        }

        @Override
        public void requestAccepted(Role role, long requestId, int promptLength, int blockCount) {
        }

        @Override
        public void requestInfoSent(long requestId, int peerRank) {
        }

        @Override
        public void requestInfoReceived(long requestId, int peerRank) {
        }

        @Override
        public void readySignalSent(long requestId, int peerRank, boolean value) {
        }

        @Override
        public void readySignalReceived(long requestId, int peerRank, boolean value) {
        }

        @Override
        public void partSent(long requestId, int peerRank, long bytes, long crc32c, long durationNanos) {
        }

        @Override
        public void partReceived(long requestId, int peerRank, long bytes, long crc32c, long durationNanos) {
        }

        @Override
        public void completed(Role role, long requestId, long bytes) {
        }

        @Override
        public void failed(Role role, long requestId, ErrorCode code, String message) {
        }

        @Override
        public void cancelled(Role role, long requestId, String message) {
        }

        @Override
        public void timedOut(Role role, long requestId, String message) {
        }

        @Override
        public void close() {
        }

        @Override
        public String toString() {
            return "TransferJournal.NOOP";
        }
    };

    /** @return whether events are recorded at all (callers may skip measuring when false) */
    boolean enabled();

    /** @return whether callers should compute a CRC32C of every part's payload */
    boolean checksums();

    /**
     * A request met a peer instance. The journal records it (with this rank's and the peer's
     * {@code CacheState}) only the first time it sees that peer instance.
     *
     * @param role      this rank's role in the request
     * @param requestId the request that made the contact
     * @param peer      the peer rank's cache state and its instance's addresses (selfIndex = the peer rank)
     */
    void peerContact(Role role, long requestId, TransceiverState peer);

    /**
     * The engine handed a request to this rank ({@code respondAndSendAsync} / {@code requestAndReceiveAsync}).
     *
     * @param role         context or generation
     * @param requestId    the context request id
     * @param promptLength prompt tokens
     * @param blockCount   this rank's blocks of the request
     */
    void requestAccepted(Role role, long requestId, int promptLength, int blockCount);

    /**
     * Generation side: this rank sent its request info to a context rank.
     *
     * @param requestId the request
     * @param peerRank  the context rank
     */
    void requestInfoSent(long requestId, int peerRank);

    /**
     * Context side: a generation rank's request info arrived.
     *
     * @param requestId the request
     * @param peerRank  the generation rank that asked
     */
    void requestInfoReceived(long requestId, int peerRank);

    /**
     * Context side: the ready signal went out.
     *
     * @param requestId the request
     * @param peerRank  the generation rank
     * @param value     true = data follows, false = refused
     */
    void readySignalSent(long requestId, int peerRank, boolean value);

    /**
     * Generation side: a ready signal arrived.
     *
     * @param requestId the request
     * @param peerRank  the context rank
     * @param value     true = data follows, false = refused
     */
    void readySignalReceived(long requestId, int peerRank, boolean value);

    /**
     * One part of the payload went to a peer (one {@code TransferSession.send}).
     *
     * @param requestId     the request
     * @param peerRank      the generation rank
     * @param bytes         payload bytes
     * @param crc32c        CRC32C of the payload, or {@link #NO_CRC}
     * @param durationNanos time the send took
     */
    void partSent(long requestId, int peerRank, long bytes, long crc32c, long durationNanos);

    /**
     * One part of the payload arrived from a peer (one {@code TransferSession.recv}).
     *
     * @param requestId     the request
     * @param peerRank      the context rank
     * @param bytes         payload bytes
     * @param crc32c        CRC32C of the payload, or {@link #NO_CRC}
     * @param durationNanos time the receive took
     */
    void partReceived(long requestId, int peerRank, long bytes, long crc32c, long durationNanos);

    /**
     * The request ended successfully on this rank.
     *
     * @param role      context or generation
     * @param requestId the request
     * @param bytes     payload bytes this rank moved
     */
    void completed(Role role, long requestId, long bytes);

    /**
     * The request ended with an error other than a cancel or a timeout.
     *
     * @param role      context or generation
     * @param requestId the request
     * @param code      the error code
     * @param message   what went wrong
     */
    void failed(Role role, long requestId, ErrorCode code, String message);

    /**
     * The request was cancelled.
     *
     * @param role      context or generation
     * @param requestId the request
     * @param message   by whom / why
     */
    void cancelled(Role role, long requestId, String message);

    /**
     * The request ran past its deadline.
     *
     * @param role      context or generation
     * @param requestId the request
     * @param message   what was waited for
     */
    void timedOut(Role role, long requestId, String message);

    /**
     * Records how a request ended from its error: {@code CANCELLED} → {@link #cancelled}, {@code TIMEOUT} →
     * {@link #timedOut}, anything else → {@link #failed}.
     *
     * @param role      context or generation
     * @param requestId the request
     * @param code      the error code
     * @param message   the error message
     */
    default void ended(Role role, long requestId, ErrorCode code, String message) {
        if (code == ErrorCode.CANCELLED) {
            cancelled(role, requestId, message);
        } else if (code == ErrorCode.TIMEOUT) {
            timedOut(role, requestId, message);
        } else {
            failed(role, requestId, code, message);
        }
    }

    /** Flushes what was recorded and releases the journal's resources; later calls record nothing. */
    @Override
    void close();
}
