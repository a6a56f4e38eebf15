package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;

import java.util.List;

/**
 * One record of a journal, as {@link JournalReader} returns it. Every event knows the rank whose journal it
 * came from ({@link #source()}), its monotonic ({@code System.nanoTime()} of the writing JVM) and wall-clock
 * (nanoseconds since the epoch) timestamps, and the record version it was written with.
 */
public sealed interface JournalEvent {
    /** @return the rank whose journal holds the event */
    Source source();

    /** @return {@code System.nanoTime()} of the writing process when the event happened */
    long monoNanos();

    /** @return wall-clock time, nanoseconds since 1970-01-01T00:00Z */
    long wallNanos();

    /** @return the record type */
    RecordType type();

    /** @return the request id, or {@link Long#MIN_VALUE} for events of no request */
    default long requestId() {
        return Long.MIN_VALUE;
    }

    /**
     * Where an event was written.
     *
     * @param instance  instance name
     * @param rank      rank index in the instance
     * @param directory the queue directory, relative to the journal root
     */
    record Source(String instance, int rank, String directory) {
        @Override
        public String toString() {
            return instance + "/" + rank;
        }
    }

    /** The rank's journal was opened. */
    record Opened(Source source, long monoNanos, long wallNanos, int formatVersion, String instance, int rank,
                  long pid, String host, boolean checksums, CacheState selfState) implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.OPENED;
        }
    }

    /** First contact with a peer rank. */
    record PeerContact(Source source, long monoNanos, long wallNanos, Role role, long requestId, int peerRank,
                       CacheState selfState, CacheState peerState, String peerTransport,
                       List<String> peerAddresses) implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.PEER_CONTACT;
        }
    }

    /** The engine handed a request to the rank. */
    record Accepted(Source source, long monoNanos, long wallNanos, Role role, long requestId, int promptLength,
                    int blockCount) implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.ACCEPTED;
        }
    }

    /** Request info sent (generation side) or received (context side). */
    record RequestInfo(Source source, long monoNanos, long wallNanos, boolean received, long requestId,
                       int peerRank) implements JournalEvent {
        @Override
        public RecordType type() {
            return received ? RecordType.INFO_RECEIVED : RecordType.INFO_SENT;
        }
    }

    /** Ready signal sent (context side) or received (generation side). */
    record ReadySignal(Source source, long monoNanos, long wallNanos, boolean received, long requestId, int peerRank,
                       boolean value) implements JournalEvent {
        @Override
        public RecordType type() {
            return received ? RecordType.READY_RECEIVED : RecordType.READY_SENT;
        }
    }

    /** One payload part sent or received. */
    record Part(Source source, long monoNanos, long wallNanos, boolean received, long requestId, int peerRank,
                long bytes, long crc32c, long durationNanos) implements JournalEvent {
        @Override
        public RecordType type() {
            return received ? RecordType.PART_RECEIVED : RecordType.PART_SENT;
        }

        /** @return whether a checksum was recorded */
        public boolean hasCrc() {
            return crc32c != TransferJournal.NO_CRC;
        }
    }

    /** The request ended successfully on the rank. */
    record Completed(Source source, long monoNanos, long wallNanos, Role role, long requestId, long bytes)
            implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.COMPLETED;
        }
    }

    /**
     * The request ended without success: {@link RecordType#FAILED}, {@link RecordType#CANCELLED} or
     * {@link RecordType#TIMED_OUT} ({@code code} is CANCELLED / TIMEOUT for the latter two).
     */
    record Ended(Source source, long monoNanos, long wallNanos, RecordType type, Role role, long requestId,
                 ErrorCode code, String message) implements JournalEvent {
    }

    /** Events the rank dropped because its ring was full (a running total). */
    record Lost(Source source, long monoNanos, long wallNanos, long count) implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.LOST;
        }
    }

    /** The journal was closed cleanly. */
    record Closed(Source source, long monoNanos, long wallNanos, long written, long lost) implements JournalEvent {
        @Override
        public RecordType type() {
            return RecordType.CLOSED;
        }
    }
}
