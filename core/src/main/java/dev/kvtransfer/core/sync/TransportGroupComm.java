package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A {@link GroupComm} over the project's own transports: the members are ranks in any processes or hosts, each with
 * a {@link ConnectionManager} (Aeron, UCX, loopback, ...) whose {@link ConnectionManager#localAddress()} every
 * member knows. The ranks of one instance in separate {@code serve} processes agree on their status checks this way.
 *
 * <p><b>Allgather.</b> A call is a round with a sequence number (1, 2, ...). The member sends its array to every
 * other member (a header on the channel's header tag, then the values in chunks of at most
 * {@link Connection#EAGER_LIMIT} bytes on its payload tag, so every send is eager and all-to-all cannot deadlock),
 * then receives each other member's message of that round on the connection to that member's address. Messages of
 * one (connection, tag) arrive in order, so a member's next message is always its next round; the header's
 * sequence number, group id, size and sender rank are checked all the same, so a stray or misrouted message is
 * refused ({@code MALFORMED}) and never taken for a round.
 *
 * <p><b>Deadlines.</b> A round that does not complete by the deadline fails with {@code TIMEOUT} naming the members
 * (rank and address) whose message is missing. As with {@code MpiGroupComm}, the round is not withdrawn: the others
 * may already have used our values. The next call first finishes that round (its result is dropped), then runs its
 * own, so members stay in step as long as everyone keeps calling in the same order.
 *
 * <p><b>Failures.</b> A member that closes its comm tells the others (a LEAVE header): their waiting or next call
 * fails at once with {@code PEER_LOST} naming it. A member that dies is seen as the transport sees it: a transport
 * with peer-failure detection fails the receive with {@code PEER_LOST}, any other reaches the deadline
 * ({@code TIMEOUT} naming the member). Any failure other than a timeout (peer lost, a refused message, the local
 * manager closed) breaks the group: every later call fails with the same code and the first cause. A send that
 * fails does not stop the round's other sends, so the other members see the failure for themselves rather than
 * wait for this member until their deadline.
 *
 * <p><b>Authentication.</b> The comm trusts what the transport's session says about a sender: it only receives on
 * the connections to its members' addresses. With a deployment secret ({@code TransportConfig.authSecret()}) the
 * transports authenticate every peer (Aeron: an HMAC-signed HELLO binds each stream to its sender's address), so a
 * process without the secret cannot speak as a member.
 *
 * <p><b>Tags.</b> Channel {@code c} uses tags {@code FIRST_TAG + 2c} (headers) and {@code FIRST_TAG + 2c + 1}
 * (values), inside {@code [FIRST_TAG, LAST_TAG]}: above every fixed control tag of {@link Tags} and below
 * {@link Tags#FIRST_DATA_TAG}, so a group shares a rank's manager with its transceiver without ever taking one of
 * its messages. Two groups on one manager (a rank's context and generation groups) use distinct channels;
 * {@link TransportGroups} takes channels 0 and 1, {@link RankRendezvous} {@value #MAX_CHANNEL}, and
 * {@code serve --rank}'s command channel {@code MAX_CHANNEL - 1}.
 *
 * <p>Sizes are bounded: a member's array has at most {@code maxValues} values (default
 * {@value #DEFAULT_MAX_VALUES}); a header announcing more (or a negative count) is refused {@code MALFORMED} before
 * anything is allocated for it.
 *
 * <p>One thread per member calls {@link #allgather} at a time (the {@link GroupComm} contract); {@link #close()} may
 * come from any thread. The manager stays the caller's.
 */
public final class TransportGroupComm implements GroupComm {
    /** First tag of the group range (headers of channel 0). */
    public static final int FIRST_TAG = 512;
    /** Last tag of the group range. */
    public static final int LAST_TAG = Tags.FIRST_DATA_TAG - 1;
    /** Largest channel number: channels {@code 0 ..} {@value #MAX_CHANNEL}. */
    public static final int MAX_CHANNEL = (LAST_TAG - FIRST_TAG - 1) / 2;
    /** Default bound of one member's array: 1 Mi values (8 MiB). */
    public static final int DEFAULT_MAX_VALUES = 1 << 20;
    /** Header bytes: magic, kind, group id, sequence, sender rank, group size, count, reserved. */
    static final int HEADER_BYTES = 40;
    static final int MAGIC = 0x4347564B; // "KVGC" little-endian
    static final int KIND_ROUND = 1;
    static final int KIND_LEAVE = 2;
    static final int CHUNK_VALUES = (int) (Connection.EAGER_LIMIT / Long.BYTES);
    private static final Duration LEAVE_TIMEOUT = Duration.ofSeconds(1);

    private final ConnectionManager manager;
    private final List<String> addresses;
    private final int rank;
    private final int size;
    private final long groupId;
    private final int channel;
    private final int headerTag;
    private final int payloadTag;
    private final int maxValues;
    private final Connection[] peers;
    private final Inbound[] inbound;
    private final HostBufferManager memory = new HostBufferManager();
    private final MemoryBuffer recvHeader;
    private final MemoryBuffer recvChunk;
    private final MemoryBuffer leaveHeader;
    private final ReentrantLock callLock = new ReentrantLock();
    private MemoryBuffer sendBuffer;
    private long round;
    private boolean roundOpen;
    private long[][] gathered;
    private final int[] sentParts;
    private int sendCount;
    private volatile boolean leaving;
    private volatile boolean closed;
    private volatile KvTransferException broken;
    private boolean freed;

    private TransportGroupComm(ConnectionManager manager, List<String> addresses, int rank, long groupId, int channel,
                               int maxValues) {
        this.manager = manager;
        this.addresses = addresses;
        this.rank = rank;
        this.size = addresses.size();
        this.groupId = groupId;
        this.channel = channel;
        this.headerTag = FIRST_TAG + 2 * channel;
        this.payloadTag = headerTag + 1;
        this.maxValues = maxValues;
        this.peers = new Connection[size];
        this.inbound = new Inbound[size];
        this.sentParts = new int[size];
        for (int i = 0; i < size; i++) {
            if (i != rank) {
                peers[i] = manager.connection(addresses.get(i));
                inbound[i] = new Inbound();
            }
        }
        this.recvHeader = memory.allocate(HEADER_BYTES, MemoryKind.HOST);
        this.recvChunk = memory.allocate((long) CHUNK_VALUES * Long.BYTES, MemoryKind.HOST);
        this.leaveHeader = memory.allocate(HEADER_BYTES, MemoryKind.HOST);
        this.sendBuffer = memory.allocate(HEADER_BYTES, MemoryKind.HOST);
    }

    /**
     * Joins a group with the default size bound.
     *
     * @param manager   this member's manager; its {@link ConnectionManager#localAddress()} is {@code addresses[rank]}
     * @param addresses every member's address, index = member rank
     * @param rank      this member's rank in the group
     * @param groupId   the same on every member, different for every group sharing a channel anywhere (e.g. a
     *                  hash of the instance id and the group's key): a message of another group is refused
     * @param channel   {@code 0 ..} {@value #MAX_CHANNEL}: groups sharing a manager use distinct channels
     * @return this member's comm
     */
    public static TransportGroupComm join(ConnectionManager manager, List<String> addresses, int rank, long groupId,
                                          int channel) {
        return join(manager, addresses, rank, groupId, channel, DEFAULT_MAX_VALUES);
    }

    /**
     * Joins a group. Nothing is exchanged yet: the first {@link #allgather} meets the others.
     *
     * @param manager   this member's manager; its {@link ConnectionManager#localAddress()} is {@code addresses[rank]}
     * @param addresses every member's address, index = member rank, all distinct
     * @param rank      this member's rank in the group
     * @param groupId   the same on every member (see {@link #join(ConnectionManager, List, int, long, int)})
     * @param channel   {@code 0 ..} {@value #MAX_CHANNEL}
     * @param maxValues the most values one member may contribute to a round ({@code >= 0})
     * @return this member's comm
     */
    public static TransportGroupComm join(ConnectionManager manager, List<String> addresses, int rank, long groupId,
                                          int channel, int maxValues) {
        Objects.requireNonNull(manager, "manager");
        List<String> members = List.copyOf(Objects.requireNonNull(addresses, "addresses"));
        if (members.isEmpty()) {
            throw new IllegalArgumentException("addresses: a group has at least one member");
        }
        Objects.checkIndex(rank, members.size());
        if (channel < 0 || channel > MAX_CHANNEL) {
            throw new IllegalArgumentException("channel = " + channel + ": must be in 0.." + MAX_CHANNEL);
        }
        if (maxValues < 0) {
            throw new IllegalArgumentException("maxValues = " + maxValues + ": must be >= 0");
        }
        if (members.stream().distinct().count() != members.size()) {
            throw new IllegalArgumentException("addresses " + members + ": a member address appears twice");
        }
        if (!members.get(rank).equals(manager.localAddress())) {
            throw new IllegalArgumentException("addresses[" + rank + "] = " + members.get(rank) + " is not this "
                    + "member's manager, which listens at " + manager.localAddress());
        }
        return new TransportGroupComm(manager, members, rank, groupId, channel, maxValues);
    }

    @Override
    public int rank() {
        return rank;
    }

    @Override
    public int size() {
        return size;
    }

    /** @return the members' addresses, index = rank */
    public List<String> addresses() {
        return addresses;
    }

    @Override
    public List<long[]> allgather(long[] values, Duration timeout) {
        Objects.requireNonNull(values, "values");
        Objects.requireNonNull(timeout, "timeout");
        if (values.length > maxValues) {
            throw new IllegalArgumentException("allgather of " + values.length + " values: at most " + maxValues);
        }
        long deadline = System.nanoTime() + Math.max(0, timeout.toNanos());
        callLock.lock();
        try {
            checkUsable();
            if (roundOpen) {
                // An earlier round timed out; the others may have completed it with our values: finish it first.
                List<Integer> missing = complete(deadline);
                if (!missing.isEmpty()) {
                    throw timeout("round " + round + " (of an earlier call that timed out) is still incomplete",
                            missing, timeout);
                }
                roundOpen = false;
            }
            prepareSend(values, round + 1); // may fail (memory): then no round was started
            round++;
            gathered = new long[size][];
            gathered[rank] = values.clone();
            roundOpen = true;
            List<Integer> missing = complete(deadline);
            if (!missing.isEmpty()) {
                throw timeout("round " + round, missing, timeout);
            }
            roundOpen = false;
            long[][] result = gathered;
            gathered = null;
            return Arrays.asList(result);
        } finally {
            callLock.unlock();
            if (closed) {
                freeIfIdle();
            }
        }
    }

    private void checkUsable() {
        if (leaving) {
            throw new KvTransferException(ErrorCode.INTERNAL, this + " is closed");
        }
        KvTransferException b = broken;
        if (b != null) {
            throw new KvTransferException(b.code(), KvTransferException.NO_REQUEST, this + " is broken: "
                    + b.getMessage(), b);
        }
    }

    /** Writes the round's message into the send buffer; it stays there until every member has it. */
    private void prepareSend(long[] values, long seq) {
        long bytes = HEADER_BYTES + (long) values.length * Long.BYTES;
        if (sendBuffer.size() < bytes) {
            MemoryBuffer larger = memory.allocate(bytes, MemoryKind.HOST);
            sendBuffer.close();
            sendBuffer = larger;
        }
        ByteBuffer b = sendBuffer.asByteBuffer();
        writeHeader(b, KIND_ROUND, seq, values.length);
        b.position(HEADER_BYTES);
        b.asLongBuffer().put(values);
        sendCount = values.length;
        for (int i = 0; i < size; i++) {
            sentParts[i] = i == rank ? Integer.MAX_VALUE : 0;
        }
    }

    /**
     * Sends what member i has not yet got of this round: the header (part 0), then the chunks. A send that times out
     * (e.g. Aeron waits for a member whose process has not started yet) is tried again by the next attempt.
     *
     * @return whether member i has the whole round
     */
    private boolean send(int i, long deadline) {
        int chunks = (sendCount + CHUNK_VALUES - 1) / CHUNK_VALUES;
        try {
            while (sentParts[i] <= chunks) {
                int part = sentParts[i];
                if (part == 0) {
                    peers[i].send(headerTag, sendBuffer, 0, HEADER_BYTES, left(deadline));
                } else {
                    int from = (part - 1) * CHUNK_VALUES;
                    int n = Math.min(CHUNK_VALUES, sendCount - from);
                    peers[i].send(payloadTag, sendBuffer, HEADER_BYTES + (long) from * Long.BYTES,
                            (long) n * Long.BYTES, left(deadline));
                }
                sentParts[i] = part + 1;
            }
            sentParts[i] = Integer.MAX_VALUE;
            return true;
        } catch (TransportClosedException e) {
            throw breakWith(ErrorCode.NETWORK, "this member's manager closed while sending round " + round + " to "
                    + member(i) + ": " + e.getMessage(), e);
        } catch (KvTransferException e) {
            if (e.code() == ErrorCode.TIMEOUT) {
                return false;
            }
            // Some members may have this round and others never will: the group cannot stay in step.
            throw breakWith(e.code(), "sending round " + round + " to " + member(i) + " failed: " + e.getMessage(),
                    e);
        }
    }

    /**
     * Sends what is unsent and receives what is missing of the open round.
     *
     * @return the members still missing at the deadline (not reached, or not heard from)
     */
    private List<Integer> complete(long deadline) {
        List<Integer> missing = new ArrayList<>();
        boolean[] unsent = new boolean[size];
        KvTransferException failed = null;
        for (int i = 0; i < size; i++) {
            // A send that breaks the group does not stop the others: a member that never got our round would wait
            // for it until its deadline, instead of finding for itself what broke (a lost member, say).
            try {
                if (sentParts[i] != Integer.MAX_VALUE && !send(i, deadline)) {
                    unsent[i] = true;
                }
            } catch (KvTransferException e) {
                if (failed == null) {
                    failed = e;
                }
            }
        }
        if (failed != null) {
            throw failed;
        }
        for (int i = 0; i < size; i++) {
            if ((gathered[i] == null && !receive(i, deadline)) || unsent[i]) {
                missing.add(i);
            }
        }
        return missing;
    }

    private void writeHeader(ByteBuffer b, int kind, long seq, int count) {
        b.putInt(0, MAGIC).putInt(4, kind).putLong(8, groupId).putLong(16, seq).putInt(24, rank).putInt(28, size)
                .putInt(32, count).putInt(36, 0);
    }

    /** @return whether member i's message of the open round is in; false when the deadline passed first */
    private boolean receive(int i, long deadline) {
        Inbound in = inbound[i];
        if (in.values == null) {
            if (!recv(i, headerTag, recvHeader, HEADER_BYTES, deadline)) {
                return false;
            }
            acceptHeader(i, recvHeader.asByteBuffer());
        }
        ByteBuffer chunk = recvChunk.asByteBuffer();
        while (in.filled < in.values.length) {
            int n = Math.min(CHUNK_VALUES, in.values.length - in.filled);
            if (!recv(i, payloadTag, recvChunk, (long) n * Long.BYTES, deadline)) {
                return false; // the next attempt resumes at this chunk
            }
            chunk.clear();
            chunk.asLongBuffer().get(in.values, in.filled, n);
            in.filled += n;
        }
        gathered[i] = in.values;
        in.values = null;
        in.filled = 0;
        in.nextSeq++;
        return true;
    }

    /** @return true when the message arrived, false at the deadline; any other failure breaks the group */
    private boolean recv(int i, int tag, MemoryBuffer into, long length, long deadline) {
        try {
            peers[i].recv(tag, into, 0, length, left(deadline));
            return true;
        } catch (TransportClosedException e) {
            throw breakWith(ErrorCode.NETWORK, "this member's manager closed while receiving round " + round
                    + " from " + member(i) + ": " + e.getMessage(), e);
        } catch (KvTransferException e) {
            if (e.code() == ErrorCode.TIMEOUT) {
                return false;
            }
            throw breakWith(e.code(), "receiving round " + round + " from " + member(i) + " failed: "
                    + e.getMessage(), e);
        }
    }

    private void acceptHeader(int i, ByteBuffer h) {
        int magic = h.getInt(0);
        int kind = h.getInt(4);
        long gid = h.getLong(8);
        long seq = h.getLong(16);
        int sender = h.getInt(24);
        int senderSize = h.getInt(28);
        int count = h.getInt(32);
        if (magic != MAGIC) {
            throw malformed(i, "bad magic 0x" + Integer.toHexString(magic));
        }
        if (gid != groupId || sender != i || senderSize != size) {
            throw malformed(i, "a message of group " + gid + " rank " + sender + "/" + senderSize
                    + ", expected group " + groupId + " rank " + i + "/" + size);
        }
        if (kind == KIND_LEAVE) {
            throw breakWith(ErrorCode.PEER_LOST, member(i) + " left the group (round " + round + ")", null);
        }
        if (kind != KIND_ROUND) {
            throw malformed(i, "unknown kind " + kind);
        }
        if (seq != inbound[i].nextSeq) {
            throw malformed(i, "round " + seq + " where round " + inbound[i].nextSeq + " was due");
        }
        if (count < 0 || count > maxValues) {
            throw malformed(i, "announces " + count + " values; at most " + maxValues + " are accepted");
        }
        inbound[i].values = new long[count];
        inbound[i].filled = 0;
    }

    private KvTransferException malformed(int i, String why) {
        return breakWith(ErrorCode.MALFORMED, "refused a message from " + member(i) + ": " + why, null);
    }

    private KvTransferException breakWith(ErrorCode code, String why, Throwable cause) {
        KvTransferException e = new KvTransferException(code, KvTransferException.NO_REQUEST, this + ": " + why,
                cause);
        if (broken == null) {
            broken = e;
        }
        return e;
    }

    private KvTransferException timeout(String what, List<Integer> missing, Duration timeout) {
        StringBuilder names = new StringBuilder();
        for (int i : missing) {
            names.append(names.length() == 0 ? "" : ", ").append(member(i));
        }
        return new KvTransferException(ErrorCode.TIMEOUT, KvTransferException.NO_REQUEST, this + ": allgather "
                + what + ": " + missing.size() + " of " + size + " members did not arrive within "
                + timeout.toMillis() + " ms: " + names, null);
    }

    private String member(int i) {
        return "member " + i + " (" + addresses.get(i) + ")";
    }

    private static Duration left(long deadline) {
        return Duration.ofNanos(Math.max(0, deadline - System.nanoTime()));
    }

    /**
     * Leaves the group: tells every other member (their waiting or next call fails with {@code PEER_LOST}) and
     * frees this member's buffers. Idempotent; the manager stays open.
     */
    @Override
    public void close() {
        if (leaving) {
            return;
        }
        leaving = true;
        ByteBuffer b = leaveHeader.asByteBuffer();
        b.putInt(0, MAGIC).putInt(4, KIND_LEAVE).putLong(8, groupId).putLong(16, -1).putInt(24, rank)
                .putInt(28, size).putInt(32, 0).putInt(36, 0);
        if (broken == null && manager.isRunning()) {
            for (int i = 0; i < size; i++) {
                if (i == rank) {
                    continue;
                }
                try {
                    peers[i].send(headerTag, leaveHeader, 0, HEADER_BYTES, LEAVE_TIMEOUT);
                } catch (RuntimeException best) {
                    // Best effort: a member we cannot tell notices on its own (peer loss or its deadline).
                }
            }
        }
        closed = true;
        freeIfIdle(); // else the call in progress frees on its way out
    }

    private void freeIfIdle() {
        if (!callLock.tryLock()) {
            return;
        }
        try {
            if (freed) {
                return;
            }
            freed = true;
            recvHeader.close();
            recvChunk.close();
            leaveHeader.close();
            sendBuffer.close();
            memory.close();
        } finally {
            callLock.unlock();
        }
    }

    @Override
    public String toString() {
        return "TransportGroupComm{group " + groupId + " channel " + channel + ", member " + rank + "/" + size
                + " at " + addresses.get(rank) + "}";
    }

    /** What has arrived of one member's message of the open round. */
    private static final class Inbound {
        long nextSeq = 1;
        long[] values;
        int filled;
    }
}
