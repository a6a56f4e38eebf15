package dev.kvtransfer.api.model;

import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.Arrays;
import java.util.Objects;

/**
 * What a generation rank sends each context counterpart to ask for a request's cache.
 *
 * <p>Format version 2 adds prefix reuse ({@code reusedBlocks} leading blocks the generation side already holds,
 * with the hash of each so a disagreement about the prefix is refused instead of silently corrupting), the
 * requesting rank's block ids (so both sides can plan the same coalesced messages), and what authentication
 * needs: the request token from the {@code ContextPhaseParams}, a fresh nonce and a timestamp (replays are
 * refused); the MAC itself travels after the encoded info.
 *
 * @param requestId         the <em>context</em> request id
 * @param indexFromEnd      number of requested blocks minus one
 * @param lastBlockKey      key of the prompt's last block (tokens or hashes; may be empty)
 * @param requesterState    the generation rank's own cache and comm state (its {@code selfIndex} set)
 * @param dataTag           the per-transfer tag the payload travels on (unique among in-flight transfers), at
 *                          least {@link Tags#FIRST_DATA_TAG} so it never collides with a control tag
 * @param chunkBytes        largest payload message the requester accepts; parts above it are sent in chunks of
 *                          exactly this size (last one shorter); 0 = no chunking
 * @param reusedBlocks      leading global blocks of the request the generation side holds already (not sent)
 * @param reusedBlockHashes the hash of each reused block ({@code reusedBlocks} entries)
 * @param blockIds          the requesting rank's block ids of the request, in order (reused ones included)
 * @param requestToken      the token from the request's {@code ContextPhaseParams} (empty without auth)
 * @param nonce             16 fresh random bytes (empty without auth)
 * @param timestampMillis   the requester's wall clock when it sent the info (epoch milliseconds)
 * @param flags             options the requester chose for this transfer ({@link #FLAG_PART_CHECKSUMS},
 *                          {@link #FLAG_NO_COALESCE})
 * @param blocksPerRegion   blocks per region of the requester's pool (lets both sides coalesce across blocks)
 * @param grants            for a push: what the requester registered for this request's blocks (empty for pull)
 * @param tokensChecksum    with {@link #FLAG_TOKENS_CHECKSUM}: the checksum of the first generated and draft tokens
 *                          of the params the requester holds ({@link ContextPhaseParams#tokensChecksum()}); else 0
 */
public record RequestInfo(long requestId, int indexFromEnd, long[] lastBlockKey, TransceiverState requesterState,
                          int dataTag, long chunkBytes, int reusedBlocks, long[] reusedBlockHashes, int[] blockIds,
                          byte[] requestToken, byte[] nonce, long timestampMillis, int flags, int blocksPerRegion,
                          java.util.List<dev.kvtransfer.api.format.PeerPool.Grant> grants, int tokensChecksum) {
    /** Nonce length when authentication is on. */
    public static final int NONCE_BYTES = 16;
    /** Flag: every message carries an end-to-end CRC32C, checked by the receiver before it completes. */
    public static final int FLAG_PART_CHECKSUMS = 1;
    /**
     * Flag: plan one message per block (no coalescing of blocks consecutive on both sides) for a pull. Both sides
     * then plan without the peer's block ids; for comparisons and for peers whose pools must not be read in runs.
     */
    public static final int FLAG_NO_COALESCE = 2;
    /**
     * Flag (format version 4): partial block reuse. The requester's prefix hit continues into block
     * {@code reusedBlocks}, of which it holds the leading tokens in a private copy; that block is sent whole and
     * overwrites them. The context side serves it only when both cache states declare
     * {@link CacheState#partialReuse()}, and refuses it naming both otherwise.
     */
    public static final int FLAG_PARTIAL_REUSE = 4;
    /**
     * Flag: the info echoes {@link #tokensChecksum()}, the checksum of the tokens in the requester's
     * {@code ContextPhaseParams}, as an {@code int32} after the grants (format version 4; no new version: an older
     * reader refuses the unknown flag). With authentication on the requester always sets it and the context side
     * compares it with the checksum the request token was issued for, so tokens replaced between the instances are
     * refused; without authentication it is not sent.
     */
    public static final int FLAG_TOKENS_CHECKSUM = 8;
    /**
     * Flag: the requester takes progress notices while a context rank writes into its granted blocks, each with
     * the entries written so far, and checks those entries while the next ones are written (format version 4; no
     * new version: an older reader refuses the unknown flag). Set with part checksums on a request that grants.
     */
    public static final int FLAG_PROGRESS_NOTICES = 16;
    /**
     * Flag: a pull whose context ranks send only once the requester said {@code go} on the data tag (a
     * {@code PushNoticeFlyweight} of type {@code GO}, sent when its receive starts), so a context sender thread never
     * waits for a receiver that is not receiving (format version 4; no new version: an older reader refuses the
     * unknown flag). Set on pulls above the inline size.
     */
    public static final int FLAG_PULL_GO = 32;
    /** Flags this version knows. */
    public static final int KNOWN_FLAGS = FLAG_PART_CHECKSUMS | FLAG_NO_COALESCE | FLAG_PARTIAL_REUSE
            | FLAG_TOKENS_CHECKSUM | FLAG_PROGRESS_NOTICES | FLAG_PULL_GO;
    private static final int WIRE_TAG = 0x52; // 'R'

    /**
     * Validates and copies the arrays.
     *
     * @param requestId         context request id
     * @param indexFromEnd      blocks minus one
     * @param lastBlockKey      last block key
     * @param requesterState    the requester's state
     * @param dataTag           payload tag
     * @param chunkBytes        chunk size or 0
     * @param reusedBlocks      reused leading blocks
     * @param reusedBlockHashes their hashes
     * @param blockIds          requester's block ids
     * @param requestToken      token or empty
     * @param nonce             nonce or empty
     * @param timestampMillis   send time
     * @param flags             transfer options
     * @param blocksPerRegion   requester's blocks per region
     * @param grants            push grants or empty
     * @param tokensChecksum    the echoed tokens checksum with {@link #FLAG_TOKENS_CHECKSUM}, else 0
     */
    public RequestInfo {
        Objects.requireNonNull(grants, "grants");
        grants = grants.isEmpty() ? java.util.List.of() : java.util.List.copyOf(grants);
        if (blocksPerRegion < 1) {
            throw new IllegalArgumentException("blocksPerRegion = " + blocksPerRegion + ": must be >= 1");
        }
        Objects.requireNonNull(lastBlockKey, "lastBlockKey");
        Objects.requireNonNull(requesterState, "requesterState");
        Objects.requireNonNull(reusedBlockHashes, "reusedBlockHashes");
        Objects.requireNonNull(blockIds, "blockIds");
        Objects.requireNonNull(requestToken, "requestToken");
        Objects.requireNonNull(nonce, "nonce");
        // Arrays decoded by readFrom are fresh and only this record holds them: taken over, not copied again.
        Object[] fresh = FRESH.get();
        lastBlockKey = fresh[0] == lastBlockKey ? lastBlockKey : copy(lastBlockKey);
        reusedBlockHashes = fresh[1] == reusedBlockHashes ? reusedBlockHashes : copy(reusedBlockHashes);
        blockIds = fresh[2] == blockIds ? blockIds : copy(blockIds);
        requestToken = fresh[3] == requestToken ? requestToken : copy(requestToken);
        nonce = fresh[4] == nonce ? nonce : copy(nonce);
        java.util.Arrays.fill(fresh, null);
        if (indexFromEnd < -1) {
            throw new IllegalArgumentException("indexFromEnd = " + indexFromEnd + ": must be >= -1");
        }
        if (chunkBytes < 0) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ": must be >= 0");
        }
        if (dataTag < Tags.FIRST_DATA_TAG) {
            // A smaller tag could be one of the fixed control tags: payload would mix with control messages.
            throw new IllegalArgumentException("dataTag = " + dataTag + ": must be >= Tags.FIRST_DATA_TAG ("
                    + Tags.FIRST_DATA_TAG + ")");
        }
        if (reusedBlocks < 0 || reusedBlocks > (long) indexFromEnd + 1) {
            throw new IllegalArgumentException("reusedBlocks = " + reusedBlocks + ": must be in [0, "
                    + (indexFromEnd + 1) + "] (the requested blocks)");
        }
        if (reusedBlockHashes.length != reusedBlocks) {
            throw new IllegalArgumentException("reusedBlockHashes has " + reusedBlockHashes.length + " entries for "
                    + reusedBlocks + " reused blocks");
        }
        if (requestToken.length != 0 && requestToken.length != ContextPhaseParams.TOKEN_BYTES) {
            throw new IllegalArgumentException("requestToken of " + requestToken.length + " bytes");
        }
        if (nonce.length != 0 && nonce.length != NONCE_BYTES) {
            throw new IllegalArgumentException("nonce of " + nonce.length + " bytes");
        }
        if ((flags & ~KNOWN_FLAGS) != 0) {
            throw new IllegalArgumentException("flags = " + flags + ": unknown bits");
        }
        if ((flags & FLAG_PARTIAL_REUSE) != 0 && reusedBlocks > indexFromEnd) {
            throw new IllegalArgumentException("a partially reused block after " + reusedBlocks + " reused blocks "
                    + "of " + (indexFromEnd + 1) + ": there is none");
        }
        if ((flags & FLAG_TOKENS_CHECKSUM) == 0 && tokensChecksum != 0) {
            throw new IllegalArgumentException("tokensChecksum = " + Integer.toHexString(tokensChecksum)
                    + " without FLAG_TOKENS_CHECKSUM: must be 0");
        }
    }

    /**
     * An info that echoes no tokens checksum (the canonical constructor before {@code tokensChecksum}).
     *
     * @param requestId         context request id
     * @param indexFromEnd      blocks minus one
     * @param lastBlockKey      last block key
     * @param requesterState    the requester's state
     * @param dataTag           payload tag
     * @param chunkBytes        chunk size or 0
     * @param reusedBlocks      reused leading blocks
     * @param reusedBlockHashes their hashes
     * @param blockIds          requester's block ids
     * @param requestToken      token or empty
     * @param nonce             nonce or empty
     * @param timestampMillis   send time
     * @param flags             transfer options (without {@link #FLAG_TOKENS_CHECKSUM})
     * @param blocksPerRegion   requester's blocks per region
     * @param grants            push grants or empty
     */
    public RequestInfo(long requestId, int indexFromEnd, long[] lastBlockKey, TransceiverState requesterState,
                       int dataTag, long chunkBytes, int reusedBlocks, long[] reusedBlockHashes, int[] blockIds,
                       byte[] requestToken, byte[] nonce, long timestampMillis, int flags, int blocksPerRegion,
                       java.util.List<dev.kvtransfer.api.format.PeerPool.Grant> grants) {
        this(requestId, indexFromEnd, lastBlockKey, requesterState, dataTag, chunkBytes, reusedBlocks,
                reusedBlockHashes, blockIds, requestToken, nonce, timestampMillis, flags, blocksPerRegion, grants, 0);
    }

    /** @return whether the info echoes the checksum of the requester's tokens ({@link #FLAG_TOKENS_CHECKSUM}) */
    public boolean echoesTokensChecksum() {
        return (flags & FLAG_TOKENS_CHECKSUM) != 0;
    }

    private static final long[] NO_LONGS = new long[0];
    private static final int[] NO_INTS = new int[0];
    private static final byte[] NO_BYTES = new byte[0];
    /**
     * Per thread, the arrays {@link #readFrom} just decoded for the record it is constructing (lastBlockKey,
     * reusedBlockHashes, blockIds, requestToken, nonce): the constructor takes those over instead of copying them,
     * and clears the slots. Any other array (a caller's) is copied as before.
     */
    private static final ThreadLocal<Object[]> FRESH = ThreadLocal.withInitial(() -> new Object[5]);

    // Empty arrays are immutable: one shared instance instead of a copy.
    private static long[] copy(long[] a) {
        return a.length == 0 ? NO_LONGS : a.clone();
    }

    private static int[] copy(int[] a) {
        return a.length == 0 ? NO_INTS : a.clone();
    }

    private static byte[] copy(byte[] a) {
        return a.length == 0 ? NO_BYTES : a.clone();
    }

    /** @return the nonce's length (0 or {@link #NONCE_BYTES}), without a copy of it */
    public int nonceLength() {
        return nonce.length;
    }

    /**
     * @param i index in {@code [0, nonceLength())}
     * @return that byte of the nonce, without a copy of it
     */
    public byte nonceAt(int i) {
        return nonce[i];
    }

    /**
     * @param at byte offset in {@code [0, nonceLength() - 8]}
     * @return the little-endian long at that offset of the nonce, without a copy of it
     */
    public long nonceLong(int at) {
        Objects.checkFromIndexSize(at, 8, nonce.length);
        long v = 0;
        for (int i = 0; i < 8; i++) {
            v |= (nonce[at + i] & 0xFFL) << (8 * i);
        }
        return v;
    }

    /**
     * Compares the request token with the given bytes in constant time (for equal lengths), without a copy.
     *
     * @param expected the bytes
     * @param from     where they start
     * @param length   how many
     * @return whether the token is exactly those bytes
     */
    public boolean requestTokenMatches(byte[] expected, int from, int length) {
        Objects.checkFromIndexSize(from, length, expected.length);
        if (requestToken.length != length) {
            return false;
        }
        int diff = 0;
        for (int i = 0; i < length; i++) {
            diff |= requestToken[i] ^ expected[from + i];
        }
        return diff == 0;
    }

    /** @return the number of the requester's block ids, without a copy of them */
    public int blockIdCount() {
        return blockIds.length;
    }

    /**
     * A request info that takes the given arrays over instead of copying them (the generation side builds one per
     * request from arrays it just made for it): the caller must not modify or hand out {@code lastBlockKey},
     * {@code reusedBlockHashes}, {@code blockIds}, {@code requestToken} or {@code nonce} afterwards. Otherwise the
     * same as the canonical constructor, checks included.
     *
     * @param requestId         context request id
     * @param indexFromEnd      blocks minus one
     * @param lastBlockKey      last block key (taken over)
     * @param requesterState    the requester's state
     * @param dataTag           payload tag
     * @param chunkBytes        chunk size or 0
     * @param reusedBlocks      reused leading blocks
     * @param reusedBlockHashes their hashes (taken over)
     * @param blockIds          requester's block ids (taken over)
     * @param requestToken      token or empty (taken over)
     * @param nonce             nonce or empty (taken over)
     * @param timestampMillis   send time
     * @param flags             transfer options
     * @param blocksPerRegion   requester's blocks per region
     * @param grants            push grants or empty
     * @return the request info
     */
    public static RequestInfo ofOwnedArrays(long requestId, int indexFromEnd, long[] lastBlockKey,
                                            TransceiverState requesterState, int dataTag, long chunkBytes,
                                            int reusedBlocks, long[] reusedBlockHashes, int[] blockIds,
                                            byte[] requestToken, byte[] nonce, long timestampMillis, int flags,
                                            int blocksPerRegion,
                                            java.util.List<dev.kvtransfer.api.format.PeerPool.Grant> grants) {
        return ofOwnedArrays(requestId, indexFromEnd, lastBlockKey, requesterState, dataTag, chunkBytes, reusedBlocks,
                reusedBlockHashes, blockIds, requestToken, nonce, timestampMillis, flags, blocksPerRegion, grants, 0);
    }

    /**
     * {@link #ofOwnedArrays(long, int, long[], TransceiverState, int, long, int, long[], int[], byte[], byte[], long,
     * int, int, java.util.List)} with an echoed tokens checksum ({@link #FLAG_TOKENS_CHECKSUM}).
     *
     * @param requestId         context request id
     * @param indexFromEnd      blocks minus one
     * @param lastBlockKey      last block key (taken over)
     * @param requesterState    the requester's state
     * @param dataTag           payload tag
     * @param chunkBytes        chunk size or 0
     * @param reusedBlocks      reused leading blocks
     * @param reusedBlockHashes their hashes (taken over)
     * @param blockIds          requester's block ids (taken over)
     * @param requestToken      token or empty (taken over)
     * @param nonce             nonce or empty (taken over)
     * @param timestampMillis   send time
     * @param flags             transfer options
     * @param blocksPerRegion   requester's blocks per region
     * @param grants            push grants or empty
     * @param tokensChecksum    the echoed tokens checksum with {@link #FLAG_TOKENS_CHECKSUM}, else 0
     * @return the request info
     */
    public static RequestInfo ofOwnedArrays(long requestId, int indexFromEnd, long[] lastBlockKey,
                                            TransceiverState requesterState, int dataTag, long chunkBytes,
                                            int reusedBlocks, long[] reusedBlockHashes, int[] blockIds,
                                            byte[] requestToken, byte[] nonce, long timestampMillis, int flags,
                                            int blocksPerRegion,
                                            java.util.List<dev.kvtransfer.api.format.PeerPool.Grant> grants,
                                            int tokensChecksum) {
        Object[] fresh = FRESH.get();
        fresh[0] = lastBlockKey;
        fresh[1] = reusedBlockHashes;
        fresh[2] = blockIds;
        fresh[3] = requestToken;
        fresh[4] = nonce;
        try {
            return new RequestInfo(requestId, indexFromEnd, lastBlockKey, requesterState, dataTag, chunkBytes,
                    reusedBlocks, reusedBlockHashes, blockIds, requestToken, nonce, timestampMillis, flags,
                    blocksPerRegion, grants, tokensChecksum);
        } finally {
            java.util.Arrays.fill(fresh, null);
        }
    }

    /** @return whether a pull may coalesce blocks consecutive on both sides (no {@link #FLAG_NO_COALESCE}) */
    public boolean coalesce() {
        return (flags & FLAG_NO_COALESCE) == 0;
    }

    /** @return whether the requester takes progress notices of a push ({@link #FLAG_PROGRESS_NOTICES}) */
    public boolean progressNotices() {
        return (flags & FLAG_PROGRESS_NOTICES) != 0;
    }

    /** @return whether the context ranks wait for the requester's go before they send ({@link #FLAG_PULL_GO}) */
    public boolean pullGo() {
        return (flags & FLAG_PULL_GO) != 0;
    }

    /** @return whether the requester holds the leading tokens of block {@code reusedBlocks} (partial reuse) */
    public boolean partialReuse() {
        return (flags & FLAG_PARTIAL_REUSE) != 0;
    }

    /**
     * Compares the key of the prompt's last block with the given one, without a copy.
     *
     * @param key the key
     * @return whether they are equal, element by element
     */
    public boolean lastBlockKeyMatches(long[] key) {
        return Arrays.equals(lastBlockKey, key);
    }

    /** @return whether the requester asked for end-to-end part checksums */
    public boolean partChecksums() {
        return (flags & FLAG_PART_CHECKSUMS) != 0;
    }

    /**
     * A request info without reuse, block ids or authentication fields.
     *
     * @param requestId      context request id
     * @param indexFromEnd   blocks minus one
     * @param lastBlockKey   last block key
     * @param requesterState the requester's state
     * @param dataTag        payload tag
     * @param chunkBytes     chunk size or 0
     */
    public RequestInfo(long requestId, int indexFromEnd, long[] lastBlockKey, TransceiverState requesterState,
                       int dataTag, long chunkBytes) {
        this(requestId, indexFromEnd, lastBlockKey, requesterState, dataTag, chunkBytes, 0, new long[0], new int[0],
                new byte[0], new byte[0], 0, 0, 1, java.util.List.of());
    }

    /** @return whether the requester asks for a one-sided push into its grants */
    public boolean push() {
        return !grants.isEmpty();
    }

    /**
     * The key of the prompt's last block.
     *
     * @return a copy of the key
     */
    @Override
    public long[] lastBlockKey() {
        return copy(lastBlockKey);
    }

    /** @return a copy of the reused blocks' hashes */
    @Override
    public long[] reusedBlockHashes() {
        return copy(reusedBlockHashes);
    }

    /** @return a copy of the requester's block ids */
    @Override
    public int[] blockIds() {
        return copy(blockIds);
    }

    /** @return a copy of the request token */
    @Override
    public byte[] requestToken() {
        return copy(requestToken);
    }

    /** @return a copy of the nonce */
    @Override
    public byte[] nonce() {
        return copy(nonce);
    }

    /**
     * Writes this request info as a whole message (magic, version, fields).
     *
     * @return the encoded bytes
     */
    public byte[] toBytes() {
        // Sized up front (the requester's state is one cached encoding): the buffer never grows.
        byte[] state = StateCodecCache.encoded(requesterState);
        long size = 96L + (state == null ? 512 : state.length) + 8L * lastBlockKey.length
                + 8L * reusedBlockHashes.length + 4L * blockIds.length + requestToken.length + nonce.length
                + grantBytes();
        WireWriter w = WireWriter.message((int) Math.min(size, 1 << 20));
        writeTo(w);
        return w.toByteArray();
    }

    /**
     * The exact length of {@link #toBytes()}'s message, for {@link #writeMessage}.
     *
     * @return bytes
     */
    public int messageSize() {
        byte[] state = stateBytes();
        long size = 6L + 1 + 8 + 4 + 4 + 8L * lastBlockKey.length + state.length + 4 + 8 + 4 + 4
                + 8L * reusedBlockHashes.length + 4 + 4L * blockIds.length + 4 + requestToken.length + 4 + nonce.length
                + 8 + 4 + 4 + 4 + (echoesTokensChecksum() ? 4 : 0) + grantBytes();
        return Math.toIntExact(size);
    }

    private long grantBytes() {
        long n = 0;
        for (int i = 0; i < grants.size(); i++) { // indexed: no iterator for the usual empty list
            n += grants.get(i).wireSize();
        }
        return n;
    }

    /** The requester state's cached encoding (made and remembered once per state instance). */
    private byte[] stateBytes() {
        byte[] state = StateCodecCache.encoded(requesterState);
        if (state == null) {
            WireWriter w = WireWriter.raw();
            requesterState.writeTo(w); // encodes once and remembers it
            state = StateCodecCache.encoded(requesterState);
            if (state == null) {
                state = w.toByteArray();
            }
        }
        return state;
    }

    /**
     * Writes the same bytes as {@link #toBytes()} into a buffer at an offset, without a message array or its copy
     * (the control plane writes a request info straight into the buffer it sends). The buffer's position, limit and
     * byte order do not matter and are not changed.
     *
     * @param dst the buffer, with at least {@link #messageSize()} bytes from {@code at}
     * @param at  where the message starts
     * @return the bytes written ({@link #messageSize()})
     * @throws IndexOutOfBoundsException when the message does not fit
     */
    public int writeMessage(java.nio.ByteBuffer dst, int at) {
        Objects.requireNonNull(dst, "dst");
        int size = messageSize();
        Objects.checkFromIndexSize(at, size, dst.limit());
        java.nio.ByteBuffer b = dst.order() == java.nio.ByteOrder.LITTLE_ENDIAN ? dst
                : dst.duplicate().order(java.nio.ByteOrder.LITTLE_ENDIAN); // absolute puts only: dst is not moved
        byte[] state = stateBytes();
        int p = at;
        b.putInt(p, WireWriter.MAGIC);
        p += 4;
        b.putShort(p, (short) WireWriter.FORMAT_VERSION);
        p += 2;
        b.put(p++, (byte) WIRE_TAG);
        b.putLong(p, requestId);
        p += 8;
        b.putInt(p, indexFromEnd);
        p += 4;
        p = putLongs(b, p, lastBlockKey);
        b.put(p, state);
        p += state.length;
        b.putInt(p, dataTag);
        p += 4;
        b.putLong(p, chunkBytes);
        p += 8;
        b.putInt(p, reusedBlocks);
        p += 4;
        p = putLongs(b, p, reusedBlockHashes);
        b.putInt(p, blockIds.length);
        p += 4;
        for (int id : blockIds) {
            b.putInt(p, id);
            p += 4;
        }
        b.putInt(p, requestToken.length);
        p += 4;
        b.put(p, requestToken);
        p += requestToken.length;
        b.putInt(p, nonce.length);
        p += 4;
        b.put(p, nonce);
        p += nonce.length;
        b.putLong(p, timestampMillis);
        p += 8;
        b.putInt(p, flags);
        p += 4;
        b.putInt(p, blocksPerRegion);
        p += 4;
        b.putInt(p, grants.size());
        p += 4;
        for (int i = 0; i < grants.size(); i++) {
            p += grants.get(i).writeTo(b, p);
        }
        if (echoesTokensChecksum()) {
            b.putInt(p, tokensChecksum);
            p += 4;
        }
        if (p - at != size) {
            throw new IllegalStateException("request info encoded " + (p - at) + " bytes, expected " + size);
        }
        return size;
    }

    private static int putLongs(java.nio.ByteBuffer b, int p, long[] values) {
        b.putInt(p, values.length);
        p += 4;
        for (long v : values) {
            b.putLong(p, v);
            p += 8;
        }
        return p;
    }

    /**
     * Decodes a whole message written by {@link #toBytes()}.
     *
     * @param bytes the message
     * @return the request info
     * @throws MalformedMessageException on any bad byte, including trailing bytes
     */
    public static RequestInfo fromBytes(byte[] bytes) {
        WireReader r = WireReader.message(bytes);
        RequestInfo info = readFrom(r);
        r.expectEnd("RequestInfo");
        return info;
    }

    /**
     * Decodes a whole message written by {@link #toBytes()} that lies in a buffer (e.g. where a transport received
     * it), without copying it out first.
     *
     * @param bytes  the buffer (its position and limit are the same after the call; not for a buffer other threads
     *               use at the same time)
     * @param from   where the message starts
     * @param length its length
     * @return the request info
     * @throws MalformedMessageException on any bad byte, including trailing bytes
     */
    public static RequestInfo fromBytes(java.nio.ByteBuffer bytes, int from, int length) {
        Objects.requireNonNull(bytes, "bytes");
        Objects.checkFromIndexSize(from, length, bytes.capacity());
        // The reader takes a slice of [position, limit): set both for the call and put them back (no duplicate).
        int position = bytes.position();
        int limit = bytes.limit();
        WireReader r;
        try {
            bytes.limit(from + length).position(from);
            r = WireReader.message(bytes);
        } finally {
            bytes.limit(limit).position(position);
        }
        RequestInfo info = readFrom(r);
        r.expectEnd("RequestInfo");
        return info;
    }

    /**
     * Writes the fields (tag first) without a message header.
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        w.writeByte(WIRE_TAG);
        w.writeLong(requestId);
        w.writeInt(indexFromEnd);
        w.writeLongArray(lastBlockKey);
        requesterState.writeTo(w);
        w.writeInt(dataTag);
        w.writeLong(chunkBytes);
        // Format version 2.
        w.writeInt(reusedBlocks);
        w.writeLongArray(reusedBlockHashes);
        w.writeIntArray(blockIds);
        w.writeBytes(requestToken);
        w.writeBytes(nonce);
        w.writeLong(timestampMillis);
        w.writeInt(flags);
        w.writeInt(blocksPerRegion);
        w.writeInt(grants.size());
        for (int i = 0; i < grants.size(); i++) { // indexed: no iterator for the usual empty list
            grants.get(i).writeTo(w);
        }
        if (echoesTokensChecksum()) {
            w.writeInt(tokensChecksum);
        }
    }

    /**
     * Reads what {@link #writeTo(WireWriter)} wrote.
     *
     * @param r the reader
     * @return the request info
     * @throws MalformedMessageException on any bad byte
     */
    public static RequestInfo readFrom(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("RequestInfo tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected RequestInfo tag " + WIRE_TAG + ", found " + tag);
        }
        long id = r.readLong("requestId");
        int indexFromEnd = r.readInt("indexFromEnd", -1, Integer.MAX_VALUE);
        long[] key = r.readLongArray("lastBlockKey");
        TransceiverState state = TransceiverState.readFrom(r);
        int dataTag = r.readInt("dataTag", Tags.FIRST_DATA_TAG, Integer.MAX_VALUE);
        int chunkAt = r.offset();
        long chunk = r.readLong("chunkBytes");
        if (chunk < 0) {
            throw new MalformedMessageException(chunkAt, "chunkBytes = " + chunk + ": must be >= 0");
        }
        if (r.version() < 2) {
            return new RequestInfo(id, indexFromEnd, key, state, dataTag, chunk);
        }
        int reusedAt = r.offset();
        int reused = r.readInt("reusedBlocks", 0, Integer.MAX_VALUE);
        long[] hashes = r.readLongArray("reusedBlockHashes");
        int[] ids = r.readIntArray("blockIds", 0, Integer.MAX_VALUE);
        int tokenAt = r.offset();
        byte[] token = r.readBytes("requestToken");
        int nonceAt = r.offset();
        byte[] nonce = r.readBytes("nonce");
        long ts = r.readLong("timestampMillis");
        int flagsAt = r.offset();
        int flags = r.readInt("flags");
        if ((flags & ~KNOWN_FLAGS) != 0 || r.version() < 4
                && (flags & (FLAG_PARTIAL_REUSE | FLAG_TOKENS_CHECKSUM)) != 0) {
            throw new MalformedMessageException(flagsAt, "flags = " + flags + ": unknown bits in format version "
                    + r.version());
        }
        if ((flags & FLAG_PARTIAL_REUSE) != 0 && reused > indexFromEnd) {
            throw new MalformedMessageException(flagsAt, "partial reuse after " + reused + " reused blocks of "
                    + (indexFromEnd + 1) + ": no block is left to be partial");
        }
        if (reused > (long) indexFromEnd + 1 || hashes.length != reused) {
            throw new MalformedMessageException(reusedAt, "reusedBlocks = " + reused + " with " + hashes.length
                    + " hashes for " + (indexFromEnd + 1) + " requested blocks");
        }
        if (token.length != 0 && token.length != ContextPhaseParams.TOKEN_BYTES) {
            throw new MalformedMessageException(tokenAt, "requestToken of " + token.length + " bytes");
        }
        if (nonce.length != 0 && nonce.length != NONCE_BYTES) {
            throw new MalformedMessageException(nonceAt, "nonce of " + nonce.length + " bytes");
        }
        int bpr = r.readInt("blocksPerRegion", 1, Integer.MAX_VALUE);
        int n = r.readCount("grants", 30);
        java.util.List<dev.kvtransfer.api.format.PeerPool.Grant> grants;
        if (n == 0) {
            grants = java.util.List.of();
        } else {
            var list = new java.util.ArrayList<dev.kvtransfer.api.format.PeerPool.Grant>(n);
            for (int i = 0; i < n; i++) {
                list.add(dev.kvtransfer.api.format.PeerPool.Grant.readFrom(r));
            }
            grants = list;
        }
        int echoed = (flags & FLAG_TOKENS_CHECKSUM) != 0 ? r.readInt("tokensChecksum") : 0;
        Object[] fresh = FRESH.get();
        fresh[0] = key;
        fresh[1] = hashes;
        fresh[2] = ids;
        fresh[3] = token;
        fresh[4] = nonce;
        try {
            return new RequestInfo(id, indexFromEnd, key, state, dataTag, chunk, reused, hashes, ids, token, nonce,
                    ts, flags, bpr, grants, echoed);
        } finally {
            java.util.Arrays.fill(fresh, null);
        }
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof RequestInfo i && requestId == i.requestId && indexFromEnd == i.indexFromEnd
                && Arrays.equals(lastBlockKey, i.lastBlockKey) && requesterState.equals(i.requesterState)
                && requesterState.selfIndex() == i.requesterState.selfIndex()
                && dataTag == i.dataTag && chunkBytes == i.chunkBytes && reusedBlocks == i.reusedBlocks
                && Arrays.equals(reusedBlockHashes, i.reusedBlockHashes) && Arrays.equals(blockIds, i.blockIds)
                && Arrays.equals(requestToken, i.requestToken) && Arrays.equals(nonce, i.nonce)
                && timestampMillis == i.timestampMillis && flags == i.flags && blocksPerRegion == i.blocksPerRegion
                && grants.equals(i.grants) && tokensChecksum == i.tokensChecksum;
    }

    @Override
    public int hashCode() {
        return Objects.hash(requestId, indexFromEnd, Arrays.hashCode(lastBlockKey), requesterState, dataTag, chunkBytes,
                reusedBlocks, Arrays.hashCode(reusedBlockHashes), Arrays.hashCode(blockIds), timestampMillis,
                tokensChecksum);
    }

    @Override
    public String toString() {
        return "RequestInfo{request " + requestId + ", blocks " + (indexFromEnd + 1)
                + (reusedBlocks > 0 ? " (" + reusedBlocks + " reused)" : "") + ", tag " + dataTag
                + ", from rank " + requesterState.selfIndex() + " " + requesterState.cacheState() + "}";
    }
}
