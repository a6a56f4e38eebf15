package dev.kvtransfer.api.format;

import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;

import java.util.Objects;
import java.util.function.IntConsumer;

/**
 * One request's transfer on one rank, as a formatter sees it: who we are, who the peers are, which blocks,
 * and how to stage, send and receive. Created by core per request and rank; used by one formatter call.
 *
 * <p>Peers are addressed by their position in {@link #targets()}{@code .peerRanks()}. {@link #send} and
 * {@link #recv} move one logical part; core splits a part into messages of the negotiated chunk size on both
 * sides, so sender and receiver only have to agree on part lengths. Every call honours the request's deadline
 * and fails with a {@code KvTransferException} carrying the request id.
 */
public interface TransferSession {
    /** @return the context request id */
    long requestId();

    /** @return true on the context (sending) side */
    boolean isSender();

    /** @return this rank's state; {@code selfState().selfIndex()} is this rank's index */
    TransceiverState selfState();

    /** @return the peer instance's cache state (for attention DP: the DP rank serving this request) */
    CacheState peerCacheState();

    /** @return {@code RankMapping.targetRanks(peerCacheState(), selfState().cacheState(), selfIndex)} */
    TargetRanks targets();

    /** @return this rank's blocks of the request, in order (block ids of the formatter's cache view) */
    int[] blockIds();

    /** @return blocks of the whole request on the context side (over all generation CP ranks) */
    int totalBlocks();

    /**
     * Prefix reuse: the number of leading global blocks of the request ({@code [0, reusedBlocks)}) the generation
     * side already holds. Formatters move only global blocks {@code [reusedBlocks, totalBlocks)}; the
     * generation side's reused blocks are never written.
     *
     * @return reused blocks, 0 when nothing is reused
     */
    default int reusedBlocks() {
        return 0;
    }

    /**
     * The peer rank's block ids of this request (all of its blocks, reused ones included, in order): generation
     * ranks send theirs in their request info, context ranks theirs right after the ready signal. Two sides that
     * both know both lists can agree on coalesced runs (blocks consecutive on both sides travel as one message).
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @return the ids, or {@code null} when the peer did not send them
     */
    default int[] peerBlockIds(int peerIndex) {
        return null;
    }

    /**
     * Blocks per region of the peer rank's pool (from its request info or ready signal): with it a planner knows
     * which of the peer's consecutive blocks are also adjacent in memory.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @return at least 1 (1 when unknown)
     */
    default int peerBlocksPerRegion(int peerIndex) {
        return 1;
    }

    /** @return true for a one-sided push (the context side writes into the peers' pools) */
    default boolean isPush() {
        return false;
    }

    /**
     * Push mode, context side: where the peer's blocks of this request live.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @return the peer's pool, or {@code null} when not pushing
     */
    default PeerPool peerPool(int peerIndex) {
        return null;
    }

    /**
     * Push mode, context side: writes a batch into the peer's pool and returns on remote completion; counted
     * and checksummed as a {@link #send} is.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param batch     the entries (targets from {@link #peerPool}{@code (peerIndex).regions()})
     * @throws UnsupportedOperationException when not pushing
     */
    default void write(int peerIndex, dev.kvtransfer.api.transport.WriteBatch batch) {
        throw new UnsupportedOperationException("this session is not a push session");
    }

    /**
     * Staging buffers for this transfer from the {@link TransferBufferPool}, released when the session ends.
     *
     * @param sizes byte size of each buffer
     * @return one buffer per size
     */
    MemoryBuffer[] stagingBuffers(long[] sizes);

    /** @return the manager to copy between cache and staging memory */
    BufferManager bufferManager();

    /**
     * Whether this session's transport sends, receives and writes buffers of a memory kind as they are. A formatter
     * hands the transport pool memory of a kind it does not accept never: it stages that side through
     * {@link #stagingBuffers} (host or pinned host memory) instead, with the same messages, so the peer, which
     * cannot know this rank's memory, plans the same part.
     *
     * <p>The default accepts host memory ({@link MemoryKind#HOST}, {@link MemoryKind#PINNED_HOST}) and refuses
     * {@link MemoryKind#DEVICE}, which only a transport declaring
     * {@link dev.kvtransfer.api.transport.TransportCapability#DEVICE_MEMORY} takes.
     *
     * @param kind a memory kind
     * @return whether buffers of that kind may go to {@link #send}, {@link #recv} and {@link #write} directly
     */
    default boolean transportAccepts(MemoryKind kind) {
        return Objects.requireNonNull(kind, "kind") != MemoryKind.DEVICE;
    }

    /**
     * Sends one part to a peer on the request's data tag.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param buffer    source
     * @param offset    first byte
     * @param length    part length
     */
    void send(int peerIndex, MemoryBuffer buffer, long offset, long length);

    /**
     * Receives one part from a peer on the request's data tag.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param buffer    destination
     * @param offset    first byte
     * @param length    part length (must equal what the peer sent)
     */
    void recv(int peerIndex, MemoryBuffer buffer, long offset, long length);

    /**
     * Whether this session keeps part checksums: the CRC32C of every message it moves, which the receiver checks
     * end to end. A formatter that copies a message's bytes itself (a gather before a send, a scatter after a
     * receive) may then compute that CRC32C in the same pass (formatter-support's
     * {@code dev.kvtransfer.formatter.support.ChunkCrc}) and hand it over with
     * {@link #send(int, MemoryBuffer, long, long, int)} or {@link #recvChecksumLater} / {@link #receivedChecksum},
     * so the session does not read the bytes a second time. The default is false.
     *
     * @return whether messages are checksummed
     */
    default boolean partChecksums() {
        return false;
    }

    /**
     * As {@link #send(int, MemoryBuffer, long, long)}, with the CRC32C (the JDK's {@code java.util.zip.CRC32C}) of
     * {@code buffer[offset, offset + length)} that the caller computed while it placed those bytes. The session
     * uses it where the part travels as one message and checksums by itself otherwise (a part it splits into
     * several chunks), so a wrong value can only fail the receiver's check, never pass it silently. The default
     * ignores the value.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param buffer    source
     * @param offset    first byte
     * @param length    part length
     * @param crc32c    the CRC32C of those bytes (the low 32 bits of {@code CRC32C.getValue()})
     */
    default void send(int peerIndex, MemoryBuffer buffer, long offset, long length, int crc32c) {
        send(peerIndex, buffer, offset, length);
    }

    /**
     * As {@link #recv}, but the caller may compute the part's checksum in the pass that reads the received bytes
     * (its scatter). When this returns true the caller must call {@link #receivedChecksum} with the CRC32C of
     * exactly {@code buffer[offset, offset + length)} as received, before its next call for this peer; false means
     * the session took care of it (checksums off, or a part it moved as several chunks). The default receives and
     * returns false.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param buffer    destination (host memory)
     * @param offset    first byte
     * @param length    part length (must equal what the peer sent)
     * @return whether the caller owes this part's CRC32C
     */
    default boolean recvChecksumLater(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        recv(peerIndex, buffer, offset, length);
        return false;
    }

    /**
     * Hands over the CRC32C of the part the last {@link #recvChecksumLater} of this peer returned true for.
     *
     * @param peerIndex position in {@code targets().peerRanks()}
     * @param crc32c    the CRC32C of the received bytes
     * @throws IllegalStateException when no checksum is owed for this peer
     */
    default void receivedChecksum(int peerIndex, int crc32c) {
        throw new IllegalStateException("no part checksum is owed for peer " + peerIndex);
    }

    /**
     * Runs an action per peer: concurrently when parallel transfer is configured, else in order. Returns when
     * all are done; the first failure is rethrown after the others finish.
     *
     * @param peerIndexes the peers
     * @param action      what to do for each
     */
    void forEachPeer(int[] peerIndexes, IntConsumer action);

    /**
     * Records one timed movement (for the timing CSV and metrics).
     *
     * @param peerIndex  the peer
     * @param startNanos {@code System.nanoTime()} at start
     * @param endNanos   {@code System.nanoTime()} at end
     * @param bytes      bytes moved
     */
    void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes);
}
