package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Objects;

/**
 * How the ranks of one instance in separate processes learn each other's transport addresses before they form
 * their {@link TransportGroups}: rank 0 (the leader) is started first and tells its full address to the others
 * (e.g. {@code kvtransfer serve} prints it); every other rank sends the leader a JOIN naming its rank and address;
 * once every rank has joined, the leader answers each with the instance's address list and a key the ranks share
 * (the transceivers' token issuing key, so a token handed out by any rank verifies on all). It runs over the ranks'
 * own transports, on the reserved channel {@value #CHANNEL} of the group tag range, so it is authenticated as the
 * transport authenticates (with a deployment secret, a peer without it cannot join).
 *
 * <p>A JOIN's address must be the address the transport says it came from (a member cannot enrol another); one for
 * another instance, a rank out of range, or a second rank at one address is refused and reported in the leader's
 * timeout. Messages: a 24-byte header (magic, kind, instance hash, body length, rank) then a body of at most
 * {@value #MAX_BODY} bytes.
 */
public final class RankRendezvous {
    /** The channel of the group tag range the rendezvous uses (groups use lower channels). */
    public static final int CHANNEL = TransportGroupComm.MAX_CHANNEL;
    static final int HEADER_TAG = TransportGroupComm.FIRST_TAG + 2 * CHANNEL;
    static final int BODY_TAG = HEADER_TAG + 1;
    static final int HEADER_BYTES = 24;
    static final int MAX_BODY = 60 * 1024;
    static final int MAGIC = 0x5256564B; // "KVVR" little-endian
    static final int KIND_JOIN = 1;
    static final int KIND_WELCOME = 2;

    /**
     * What every rank knows after the rendezvous.
     *
     * @param addresses every rank's transport address, index = rank
     * @param sharedKey the key the leader handed out (the same on every rank)
     */
    public record Joined(List<String> addresses, byte[] sharedKey) {
    }

    private RankRendezvous() {
    }

    /**
     * Rank 0: waits until every other rank has joined, then welcomes each.
     *
     * @param cm        rank 0's manager
     * @param instance  the instance's name (every rank passes the same)
     * @param ranks     the instance's rank count
     * @param sharedKey the key to hand out
     * @param timeout   how long to wait for every rank
     * @return the instance's addresses and the key
     * @throws KvTransferException {@code TIMEOUT} naming the ranks that did not join (and any refused JOINs)
     */
    public static Joined lead(ConnectionManager cm, String instance, int ranks, byte[] sharedKey, Duration timeout) {
        Objects.requireNonNull(cm, "cm");
        Objects.requireNonNull(sharedKey, "sharedKey");
        long deadline = System.nanoTime() + timeout.toNanos();
        String[] addresses = new String[ranks];
        Connection[] peers = new Connection[ranks];
        addresses[0] = cm.localAddress();
        int joined = 1;
        List<String> refused = new ArrayList<>();
        try (HostBufferManager mem = new HostBufferManager();
             Buffers b = new Buffers(mem)) {
            while (joined < ranks) {
                Connection c = cm.pollConnect(HEADER_TAG, b.header, 0, HEADER_BYTES, left(deadline));
                if (c == null) {
                    List<Integer> missing = new ArrayList<>();
                    for (int r = 0; r < ranks; r++) {
                        if (addresses[r] == null) {
                            missing.add(r);
                        }
                    }
                    throw new KvTransferException(ErrorCode.TIMEOUT, KvTransferException.NO_REQUEST, "instance "
                            + instance + " at " + cm.localAddress() + ": ranks " + missing + " did not join within "
                            + timeout.toMillis() + " ms" + (refused.isEmpty() ? "" : "; refused: " + refused), null);
                }
                String problem;
                ByteBuffer h = b.header.asByteBuffer();
                int length = h.getInt(16);
                int rank = h.getInt(20);
                if (h.getInt(0) != MAGIC || h.getInt(4) != KIND_JOIN || length < 0 || length > MAX_BODY) {
                    refused.add("a malformed JOIN from " + c.peer());
                    continue; // its body (if any) stays unread on that connection: the sender is not a rank
                }
                c.recv(BODY_TAG, b.body, 0, length, left(deadline));
                String address = new String(bytes(b.body, length), StandardCharsets.UTF_8);
                if (h.getLong(8) != hash(instance)) {
                    problem = "a JOIN from " + c.peer() + " for another instance";
                } else if (rank < 1 || rank >= ranks) {
                    problem = "a JOIN from " + c.peer() + " as rank " + rank + " of an instance of " + ranks;
                } else if (!address.equals(c.peer())) {
                    problem = "a JOIN from " + c.peer() + " naming address " + address;
                } else if (Arrays.asList(addresses).contains(address) && !address.equals(addresses[rank])) {
                    problem = "a JOIN from " + c.peer() + " as rank " + rank + ": that address is another rank's";
                } else {
                    problem = null;
                }
                if (problem != null) {
                    refused.add(problem);
                    continue;
                }
                if (addresses[rank] == null) {
                    joined++;
                }
                addresses[rank] = address; // a rank restarted before everyone joined replaces its predecessor
                peers[rank] = c;
            }
            List<String> all = List.of(addresses);
            byte[] welcome = (String.join("\n", all) + "\n" + Base64.getEncoder().encodeToString(sharedKey))
                    .getBytes(StandardCharsets.UTF_8);
            if (welcome.length > MAX_BODY) {
                throw new IllegalArgumentException("instance " + instance + ": " + ranks + " addresses do not fit "
                        + "one welcome of " + MAX_BODY + " bytes");
            }
            for (int r = 1; r < ranks; r++) {
                send(b, peers[r], KIND_WELCOME, instance, 0, welcome, deadline);
            }
            return new Joined(all, sharedKey.clone());
        }
    }

    /**
     * A rank other than 0: joins the leader and waits for its welcome.
     *
     * @param cm       this rank's manager
     * @param instance the instance's name
     * @param rank     this rank ({@code 1 .. ranks-1})
     * @param ranks    the instance's rank count
     * @param leader   rank 0's full transport address
     * @param timeout  how long to wait for the welcome (every rank must have joined by then)
     * @return the instance's addresses and the shared key
     */
    public static Joined join(ConnectionManager cm, String instance, int rank, int ranks, String leader,
                              Duration timeout) {
        Objects.requireNonNull(cm, "cm");
        Objects.requireNonNull(leader, "leader");
        if (rank < 1 || rank >= ranks) {
            throw new IllegalArgumentException("rank " + rank + ": a joining rank is in 1.." + (ranks - 1));
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        Connection c = cm.connection(leader);
        try (HostBufferManager mem = new HostBufferManager();
             Buffers b = new Buffers(mem)) {
            send(b, c, KIND_JOIN, instance, rank, cm.localAddress().getBytes(StandardCharsets.UTF_8), deadline);
            try {
                c.recv(HEADER_TAG, b.header, 0, HEADER_BYTES, left(deadline));
            } catch (KvTransferException e) {
                throw new KvTransferException(e.code(), KvTransferException.NO_REQUEST, "instance " + instance
                        + " rank " + rank + ": no welcome from the leader (rank 0) at " + leader + ": "
                        + e.getMessage(), e);
            }
            ByteBuffer h = b.header.asByteBuffer();
            int length = h.getInt(16);
            if (h.getInt(0) != MAGIC || h.getInt(4) != KIND_WELCOME || h.getLong(8) != hash(instance) || length < 0
                    || length > MAX_BODY) {
                throw new KvTransferException(ErrorCode.MALFORMED, "instance " + instance + " rank " + rank
                        + ": the leader at " + leader + " answered with a malformed welcome");
            }
            c.recv(BODY_TAG, b.body, 0, length, left(deadline));
            String[] lines = new String(bytes(b.body, length), StandardCharsets.UTF_8).split("\n", -1);
            if (lines.length != ranks + 1 || !lines[rank].equals(cm.localAddress())) {
                throw new KvTransferException(ErrorCode.MALFORMED, "instance " + instance + " rank " + rank
                        + ": the leader's welcome lists " + (lines.length - 1) + " ranks, not " + ranks
                        + " with this rank at " + cm.localAddress());
            }
            return new Joined(List.of(Arrays.copyOf(lines, ranks)), Base64.getDecoder().decode(lines[ranks]));
        }
    }

    private static void send(Buffers b, Connection c, int kind, String instance, int rank, byte[] body,
                             long deadline) {
        b.header.asByteBuffer().putInt(0, MAGIC).putInt(4, kind).putLong(8, hash(instance)).putInt(16, body.length)
                .putInt(20, rank);
        b.body.asByteBuffer().put(body);
        c.send(HEADER_TAG, b.header, 0, HEADER_BYTES, left(deadline));
        c.send(BODY_TAG, b.body, 0, body.length, left(deadline));
    }

    private static byte[] bytes(MemoryBuffer m, int length) {
        byte[] out = new byte[length];
        m.asByteBuffer().get(out);
        return out;
    }

    static long hash(String instance) {
        return TransportGroups.groupId(instance, CHANNEL, "rendezvous");
    }

    private static Duration left(long deadline) {
        return Duration.ofNanos(Math.max(0, deadline - System.nanoTime()));
    }

    /** The two message buffers of one rendezvous. */
    private static final class Buffers implements AutoCloseable {
        final MemoryBuffer header;
        final MemoryBuffer body;

        Buffers(HostBufferManager mem) {
            header = mem.allocate(HEADER_BYTES, MemoryKind.HOST);
            body = mem.allocate(MAX_BODY, MemoryKind.HOST);
        }

        @Override
        public void close() {
            header.close();
            body.close();
        }
    }
}
