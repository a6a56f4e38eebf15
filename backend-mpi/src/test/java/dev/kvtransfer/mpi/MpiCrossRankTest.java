package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * What only several ranks can show, run inside every rank of an {@code mpirun} job ({@link MpiJUnitMain}) next to
 * the conformance suites: messages between processes (Open MPI's vader shared-memory transport, CMA single copy
 * for large ones) of every size class with guard bytes, chunking across ranks, one endpoint accepting every
 * other rank, several endpoints per rank all talking to each other, and {@link MpiGroupComm}. Ranks agree on
 * addresses by an allgather of endpoint ids and meet in a barrier after each test. Every rank runs every test in
 * the same order; with one rank the tests are skipped, saying why.
 */
@TestMethodOrder(MethodOrderer.MethodName.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
public class MpiCrossRankTest {
    private static final Duration T = Duration.ofSeconds(30);
    private static MpiGroupComm world;
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<HostBuffer> buffers = new ArrayList<>();

    @BeforeAll
    static void formWorld() {
        world = MpiGroupComm.world(T);
    }

    @AfterAll
    static void closeWorld() {
        if (world != null) {
            world.close();
        }
    }

    @AfterEach
    void closeAndMeet() {
        managers.forEach(ConnectionManager::close);
        buffers.forEach(HostBuffer::close);
        barrier();
    }

    private static int rank() {
        return world.rank();
    }

    private static int size() {
        return world.size();
    }

    private static void needRanks(int n) {
        Assumptions.assumeTrue(size() >= n, "needs " + n + " ranks, the job has " + size());
    }

    private static void barrier() {
        world.allgather(new long[0], T);
    }

    private ConnectionManager manager(Map<String, String> properties) {
        ConnectionManager m = new MpiTransportProvider().create(TransportConfig.builder().name("cross-rank-"
                + rank()).defaultTimeout(T).properties(properties).build());
        managers.add(m);
        return m;
    }

    private HostBuffer buffer(long bytes) {
        HostBuffer b = HostBuffer.allocate(bytes);
        buffers.add(b);
        return b;
    }

    /** @return every rank's address of its manager, index = world rank */
    private static List<String> exchange(ConnectionManager m) {
        List<long[]> all = world.allgather(new long[] {endpointOf(m)}, T);
        List<String> out = new ArrayList<>();
        for (int r = 0; r < all.size(); r++) {
            out.add(all.get(r)[0] == 0 ? Integer.toString(r) : r + "/" + all.get(r)[0]);
        }
        return out;
    }

    /** @return the endpoint id of a manager's address ({@code rank} = endpoint 0, or {@code rank/endpoint}) */
    private static long endpointOf(ConnectionManager m) {
        String a = m.localAddress();
        return a.indexOf('/') < 0 ? 0 : Long.parseLong(a.substring(a.indexOf('/') + 1));
    }

    private static void verify(HostBuffer b, long offset, long length, long seed, String what) {
        long bad = Patterns.firstMismatch(b, offset, length, seed);
        assertThat(bad).as("%s: first wrong byte (of %d)", what, length).isEqualTo(-1);
    }

    private static final long[] SIZES = {0, 1, 7, 4095, 4096, 4097, 65_536, 65_537, (1 << 20) + 3, 64L << 20};

    @Test
    void a01_everySizeClassCrossesBetweenRanksExactlyWithGuardBytes() {
        needRanks(2);
        ConnectionManager m = manager(Map.of());
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        Connection c = m.connection(addrs.get(partner));
        int tag = 5_000;
        for (long n : SIZES) {
            HostBuffer buf = buffer(n + 16);
            for (int dir = 0; dir < 2; dir++) {
                boolean sender = (rank() & 1) == dir;
                long seed = n * 2 + dir;
                if (sender) {
                    Patterns.fill(buf, 8, n, seed);
                    c.send(tag, buf, 8, n, T);
                } else {
                    Patterns.fill(buf, 0, 8, 77);
                    Patterns.fill(buf, n + 8, 8, 78);
                    c.recv(tag, buf, 8, n, T);
                    verify(buf, 8, n, seed, n + " bytes from rank " + partner);
                    verify(buf, 0, 8, 77, "guard before");
                    verify(buf, n + 8, 8, 78, "guard after");
                }
            }
        }
    }

    @Test
    void a01b_smallMessagesRoundTripBetweenRanks() {
        needRanks(2);
        ConnectionManager m = manager(Map.of());
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        Connection c = m.connection(addrs.get(partner));
        HostBuffer buf = buffer(64);
        int n = 2_000;
        long t0 = 0;
        for (int i = 0; i < n + 100; i++) {
            if (i == 100) {
                t0 = System.nanoTime();
            }
            if ((rank() & 1) == 0) {
                c.send(6_000, buf, 0, 64, T);
                c.recv(6_001, buf, 0, 64, T);
            } else {
                c.recv(6_000, buf, 0, 64, T);
                c.send(6_001, buf, 0, 64, T);
            }
        }
        double us = (System.nanoTime() - t0) / 1e3 / n;
        System.out.printf("[rank %d] 64-byte round trip with rank %d: %.1f us (mean of %d)%n", rank(), partner, us, n);
        assertThat(us).isPositive();
    }

    @Test
    void a02_payloadsAreChunkedAcrossRanksAtTheSendersChunkSize() {
        needRanks(2);
        // The sender's chunk size travels in the envelope: only the even ranks use 4 KiB chunks.
        ConnectionManager m = manager((rank() & 1) == 0 ? Map.of(MpiSettings.MAX_MESSAGE_BYTES, "4096") : Map.of());
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        Connection c = m.connection(addrs.get(partner));
        long[] sizes = {65_537, 4096L * 257, 4096L * 64 + 1, 1L << 20};
        for (long n : sizes) {
            HostBuffer buf = buffer(n);
            if ((rank() & 1) == 0) {
                Patterns.fill(buf, 0, n, n);
                c.send(9_000, buf, 0, n, T);
            } else {
                c.recv(9_000, buf, 0, n, T);
                verify(buf, 0, n, n, n + " bytes in 4 KiB chunks");
            }
        }
        // A length mismatch across ranks is MALFORMED and the tag stays usable.
        HostBuffer buf = buffer(200_000);
        if ((rank() & 1) == 0) {
            Patterns.fill(buf, 0, 200_000, 5);
            c.send(9_001, buf, 0, 200_000, T);
            c.send(9_001, buf, 0, 100_000, T);
        } else {
            assertThatThrownBy(() -> c.recv(9_001, buf, 0, 150_000, T)).isInstanceOfSatisfying(
                    TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED));
            c.recv(9_001, buf, 0, 100_000, T);
            verify(buf, 0, 100_000, 5, "message after a mismatch");
        }
    }

    @Test
    void a03_oneEndpointAcceptsEveryOtherRankAndRepliesThroughTheReturnedConnection() {
        needRanks(2);
        ConnectionManager m = manager(Map.of());
        List<String> addrs = exchange(m);
        HostBuffer buf = buffer(64);
        if (rank() == 0) {
            Set<String> seen = new HashSet<>();
            for (int i = 1; i < size(); i++) {
                Connection back = m.recvConnect(19, buf, 0, 64, T);
                int from = Integer.parseInt(back.peer().split("/")[0]);
                assertThat(back.peer()).doesNotContain("@"); // a job's own addresses are short
                verify(buf, 0, 64, 100 + from, "hello from " + back.peer());
                assertThat(back.peer()).isEqualTo(addrs.get(from));
                assertThat(seen.add(back.peer())).isTrue();
                Patterns.fill(buf, 0, 8, 200 + from);
                back.send(42, buf, 0, 8, T);
            }
        } else {
            Connection c = m.connection(addrs.get(0));
            Patterns.fill(buf, 0, 64, 100 + rank());
            c.send(19, buf, 0, 64, T);
            c.recv(42, buf, 0, 8, T);
            verify(buf, 0, 8, 200 + rank(), "reply from rank 0");
        }
    }

    @Test
    void a04_severalEndpointsPerRankAllTalkToEachOther() throws Exception {
        needRanks(2);
        int per = 3;
        List<ConnectionManager> mine = new ArrayList<>();
        for (int i = 0; i < per; i++) {
            mine.add(manager(Map.of()));
        }
        long[] ids = mine.stream().mapToLong(MpiCrossRankTest::endpointOf).toArray();
        List<long[]> all = world.allgather(ids, T);
        List<String> everyone = new ArrayList<>();
        for (int r = 0; r < size(); r++) {
            for (long id : all.get(r)) {
                everyone.add(id == 0 ? Integer.toString(r) : r + "/" + id);
            }
        }
        // Each of my endpoints sends one 100 KiB message to every endpoint (mine included), then receives one from
        // every endpoint; senders run on their own threads (large sends wait for the receiver).
        long n = 100 * 1024;
        java.util.concurrent.ExecutorService ex = java.util.concurrent.Executors.newFixedThreadPool(per);
        try {
            List<java.util.concurrent.Future<?>> sends = new ArrayList<>();
            for (int i = 0; i < per; i++) {
                ConnectionManager from = mine.get(i);
                sends.add(ex.submit(() -> {
                    try (HostBuffer src = HostBuffer.allocate(n)) {
                        for (String to : everyone) {
                            Patterns.fill(src, 0, n, (from.localAddress() + "->" + to).hashCode());
                            from.connection(to).send(7_000, src, 0, n, T);
                        }
                    }
                    return null;
                }));
            }
            HostBuffer dst = buffer(n);
            for (ConnectionManager to : mine) {
                for (String from : everyone) {
                    to.connection(from).recv(7_000, dst, 0, n, T);
                    verify(dst, 0, n, (from + "->" + to.localAddress()).hashCode(), from + " -> " + to.localAddress());
                }
            }
            for (java.util.concurrent.Future<?> f : sends) {
                f.get(60, TimeUnit.SECONDS);
            }
        } finally {
            ex.shutdownNow();
        }
    }

    /** Sends a region descriptor to a peer (length, then the wire bytes). */
    private void sendDescriptor(Connection c, dev.kvtransfer.api.transport.RegionDescriptor d) {
        dev.kvtransfer.api.wire.WireWriter w = dev.kvtransfer.api.wire.WireWriter.raw();
        d.writeTo(w);
        byte[] bytes = w.toByteArray();
        HostBuffer b = buffer(8 + bytes.length);
        b.asByteBuffer().putLong(0, bytes.length).put(8, bytes);
        c.send(8_800, b, 0, 8, T);
        c.send(8_801, b, 8, bytes.length, T);
    }

    private dev.kvtransfer.api.transport.RegionDescriptor recvDescriptor(Connection c) {
        HostBuffer len = buffer(8);
        c.recv(8_800, len, 0, 8, T);
        int n = (int) len.asByteBuffer().getLong(0);
        HostBuffer b = buffer(n);
        c.recv(8_801, b, 0, n, T);
        byte[] bytes = new byte[n];
        b.asByteBuffer().get(0, bytes);
        return dev.kvtransfer.api.transport.RegionDescriptor.readFrom(dev.kvtransfer.api.wire.WireReader.raw(bytes));
    }

    @Test
    void r01_oneSidedWritesBetweenRanksLandExactlyAndRefusalsTouchNothing() {
        needRanks(2);
        Assumptions.assumeTrue(MpiRuntime.get().rmaFailure() == null, "no MPI window: " + MpiRuntime.get()
                .rmaFailure());
        ConnectionManager m = manager(Map.of());
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        Connection c = m.connection(addrs.get(partner));
        long size = (1 << 20) + 4096;
        int guard = 4096;
        HostBuffer note = buffer(8);
        if ((rank() & 1) == 1) {
            HostBuffer whole = buffer(size + 2 * guard);
            java.nio.ByteBuffer w = whole.asByteBuffer();
            for (int i = 0; i < w.capacity(); i++) {
                w.put(i, (byte) 0xA5);
            }
            dev.kvtransfer.api.transport.RegisteredRegion region = m.register(whole.slice(guard, size));
            sendDescriptor(c, region.descriptor());
            c.recv(8_802, note, 0, 8, T); // the writer's batch completed before this was sent
            HostBuffer expect = buffer(size);
            Patterns.fill(expect, 0, size, 31);
            java.nio.ByteBuffer e = expect.asByteBuffer();
            long[][] entries = {{0, 1}, {4097, 65_537}, {size - 7, 7}, {300_000, 500_000}};
            boolean[] written = new boolean[(int) size];
            for (long[] en : entries) {
                for (long i = 0; i < en[1]; i++) {
                    written[(int) (en[0] + i)] = true;
                }
            }
            for (int i = 0; i < size; i++) {
                byte want = written[i] ? e.get(i) : (byte) 0xA5;
                assertThat(w.get(guard + i)).as("region byte %d", i).isEqualTo(want);
            }
            for (int i = 0; i < guard; i++) {
                assertThat(w.get(i)).isEqualTo((byte) 0xA5);
                assertThat(w.get((int) (guard + size + i))).isEqualTo((byte) 0xA5);
            }
            region.close();
            for (int i = 0; i < w.capacity(); i++) {
                w.put(i, (byte) 0xA5);
            }
            c.send(8_803, note, 0, 8, T); // deregistered
            c.recv(8_804, note, 0, 8, T); // the writer's refused attempts are over
            for (int i = 0; i < w.capacity(); i++) {
                assertThat(w.get(i)).as("byte %d after deregistration", i).isEqualTo((byte) 0xA5);
            }
        } else {
            dev.kvtransfer.api.transport.RegionDescriptor d = recvDescriptor(c);
            HostBuffer src = buffer(size);
            Patterns.fill(src, 0, size, 31);
            dev.kvtransfer.api.transport.WriteBatch batch = new dev.kvtransfer.api.transport.WriteBatch();
            for (long[] en : new long[][] {{0, 1}, {4097, 65_537}, {size - 7, 7}, {300_000, 500_000}}) {
                batch.add(src, en[0], d, en[0], en[1]);
            }
            c.write(batch, T);
            c.send(8_802, note, 0, 8, T);
            // forged: shifted address, other key
            byte[] k = d.key();
            k[3] ^= 1;
            for (dev.kvtransfer.api.transport.RegionDescriptor f : List.of(
                    new dev.kvtransfer.api.transport.RegionDescriptor(d.owner(), d.regionId(), d.address() + 64,
                            d.length(), d.key()),
                    new dev.kvtransfer.api.transport.RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(),
                            k))) {
                assertThatThrownBy(() -> c.write(new dev.kvtransfer.api.transport.WriteBatch().add(src, 0, f, 0, 4096),
                        T)).isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.UNAUTHORIZED));
            }
            c.recv(8_803, note, 0, 8, T);
            assertThatThrownBy(() -> c.write(new dev.kvtransfer.api.transport.WriteBatch().add(src, 0, d, 0, size), T))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.CANCELLED));
            c.send(8_804, note, 0, 8, T);
        }
    }

    /**
     * 16 MiB per message, rank 0 to rank 1: native one-sided writes (MPI_Put + MPI_Win_flush, plus the grant),
     * emulated one-sided writes (mpi.oneSided=emulated) and two-sided send/recv, same run, 3 rounds each; rank 0
     * prints {@code MPI-ONE-SIDED-BW kind=.. GBps=..}.
     */
    @Test
    void r02_oneSidedBandwidthNativeAgainstEmulatedAndTwoSided() throws Exception {
        needRanks(2);
        Assumptions.assumeTrue(MpiRuntime.get().rmaFailure() == null, "no MPI window: " + MpiRuntime.get()
                .rmaFailure());
        ConnectionManager nat = manager(Map.of());
        ConnectionManager emu = manager(Map.of(MpiSettings.ONE_SIDED, "emulated"));
        List<String> nAddrs = exchange(nat);
        List<String> eAddrs = exchange(emu);
        if (rank() > 1) {
            return;
        }
        long n = 16L << 20;
        int iters = Integer.getInteger("mpi.bw.rmaIters", 20);
        HostBuffer buf = buffer(n);
        HostBuffer note = buffer(8);
        Patterns.fill(buf, 0, n, 5);
        for (int round = 0; round < 3; round++) {
            for (String kind : List.of("native", "emulated", "send")) {
                ConnectionManager m = kind.equals("emulated") ? emu : nat;
                Connection c = m.connection((kind.equals("emulated") ? eAddrs : nAddrs).get(1 - rank()));
                if (rank() == 1) {
                    if (kind.equals("send")) {
                        for (int i = 0; i <= iters; i++) {
                            c.recv(8_900, buf, 0, n, T);
                        }
                        c.send(8_902, note, 0, 8, T);
                        continue;
                    }
                    try (dev.kvtransfer.api.transport.RegisteredRegion r = m.register(buf)) {
                        sendDescriptor(c, r.descriptor());
                        c.recv(8_901, note, 0, 8, T);
                    }
                    continue;
                }
                long t0 = 0;
                if (kind.equals("send")) {
                    for (int i = 0; i <= iters; i++) {
                        if (i == 1) {
                            t0 = System.nanoTime();
                        }
                        c.send(8_900, buf, 0, n, T);
                    }
                    c.recv(8_902, note, 0, 8, T);
                } else {
                    dev.kvtransfer.api.transport.RegionDescriptor d = recvDescriptor(c);
                    dev.kvtransfer.api.transport.WriteBatch b = new dev.kvtransfer.api.transport.WriteBatch()
                            .add(buf, 0, d, 0, n);
                    for (int i = 0; i <= iters; i++) {
                        if (i == 1) {
                            t0 = System.nanoTime();
                        }
                        c.write(b, T);
                    }
                    c.send(8_901, note, 0, 8, T);
                }
                double secs = (System.nanoTime() - t0) / 1e9;
                System.out.printf(java.util.Locale.ROOT, "MPI-ONE-SIDED-BW round=%d kind=%s bytes=%d iters=%d GBps=%.3f%n",
                        round, kind, n, iters, n * (double) iters / secs / 1e9);
            }
        }
    }

    /** Sends one raw envelope (header as given, plus payload bytes) from this rank to rank/endpoint. */
    private static void rawEnvelope(int rank, int endpoint, java.util.function.Consumer<java.nio.ByteBuffer> header,
                                    int payloadBytes) {
        try (HostBuffer h = HostBuffer.allocate(Envelope.HEADER_BYTES); HostBuffer p = HostBuffer.allocate(
                Math.max(1, payloadBytes))) {
            java.nio.ByteBuffer b = h.asByteBuffer();
            Envelope.write(b, true, 0, endpoint, 4_242, 0, payloadBytes, 0);
            header.accept(b);
            long request = MpiNative.isendEnvelope(h.address(), Envelope.HEADER_BYTES, p.address(), payloadBytes, rank,
                    endpoint, MpiRuntime.get().envelopeComm());
            while (MpiNative.test(request, 1_000_000) == 0) {
                Thread.onSpinWait();
            }
        }
    }

    @Test
    void f01_malformedEnvelopesFromARankAreDroppedAndReportedAndTheEndpointKeepsServing() {
        needRanks(2);
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        ConnectionManager m = new MpiTransportProvider().create(TransportConfig.builder().name("f01").defaultTimeout(T)
                .errorHandler(reported::add).build());
        managers.add(m);
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        int partnerEndpoint = addrs.get(partner).indexOf('/') < 0 ? 0
                : Integer.parseInt(addrs.get(partner).substring(addrs.get(partner).indexOf('/') + 1));
        Connection c = m.connection(addrs.get(partner));
        HostBuffer buf = buffer(64);
        if ((rank() & 1) == 0) {
            // bad magic; destination field disagreeing with the MPI tag; negative source endpoint; inline length
            // that is not the message's; a large message needing more than 2^31 chunks; unknown flags
            rawEnvelope(partner, partnerEndpoint, b -> b.putInt(Envelope.AT_MAGIC, 0x0bad0bad), 8);
            rawEnvelope(partner, partnerEndpoint, b -> b.putInt(Envelope.AT_DEST_ENDPOINT, partnerEndpoint + 7), 8);
            rawEnvelope(partner, partnerEndpoint, b -> b.putInt(Envelope.AT_SOURCE_ENDPOINT, -5), 8);
            rawEnvelope(partner, partnerEndpoint, b -> b.putLong(Envelope.AT_LENGTH, 1L << 40), 8);
            rawEnvelope(partner, partnerEndpoint, b -> {
                b.putInt(Envelope.AT_FLAGS, 0);
                b.putLong(Envelope.AT_LENGTH, Long.MAX_VALUE);
                b.putInt(Envelope.AT_CHUNK, 1);
                b.putInt(Envelope.AT_PAYLOAD_TAG, 3);
            }, 0);
            rawEnvelope(partner, partnerEndpoint, b -> b.putInt(Envelope.AT_FLAGS, 0x80), 8);
            Patterns.fill(buf, 0, 64, 7);
            c.send(4_243, buf, 0, 64, T);
        } else {
            c.recv(4_243, buf, 0, 64, T); // the genuine message after six hostile ones
            verify(buf, 0, 64, 7, "message after malformed envelopes");
            // reports are rate-limited per kind: at least one, naming the sender's rank and what was wrong
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).until(() -> !reported.isEmpty());
            assertThat(reported.get(0).getMessage()).contains("dropped an envelope from rank " + partner);
            assertThat(MpiRuntime.get().counterValues().get("mpi malformed envelopes")).isGreaterThanOrEqualTo(6);
            assertThat(m.isRunning()).isTrue();
        }
    }

    @Test
    void f03_aMessageForAClosedEndpointIsCountedNotReportedAndOneForAnIdNeverOpenedIsReported() {
        needRanks(2);
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        ConnectionManager m = new MpiTransportProvider().create(TransportConfig.builder().name("f03").defaultTimeout(T)
                .errorHandler(reported::add).build());
        managers.add(m);
        ConnectionManager gone = new MpiTransportProvider().create(TransportConfig.builder().name("f03-gone")
                .defaultTimeout(T).errorHandler(reported::add).build());
        List<String> addrs = exchange(m);
        List<String> goneAddrs = exchange(gone);
        gone.close();
        String dropped = "mpi messages dropped (closed endpoint or queue bound)";
        long droppedBefore = MpiRuntime.get().counterValues().get(dropped);
        world.allgather(new long[] {0}, T); // both ranks closed theirs before anything is sent to it
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        int goneEndpoint = Integer.parseInt(goneAddrs.get(partner).substring(goneAddrs.get(partner).indexOf('/') + 1));
        int neverOpened = goneEndpoint + 100_000;
        Connection c = m.connection(addrs.get(partner));
        HostBuffer buf = buffer(64);
        if ((rank() & 1) == 0) {
            // a late message of an orderly shutdown: the partner's endpoint closed after its id was issued
            rawEnvelope(partner, goneEndpoint, b -> { }, 8);
            Patterns.fill(buf, 0, 64, 11);
            c.send(4_250, buf, 0, 64, T); // after it, from the same rank: processed after it
            c.recv(4_252, buf, 0, 8, T); // the partner checked that nothing was reported
            // an id the partner never issued, until it says it heard (reports are rate-limited per kind)
            for (int i = 0; i < 40; i++) {
                rawEnvelope(partner, neverOpened, b -> { }, 8);
                try {
                    c.recv(4_251, buf, 0, 8, Duration.ofMillis(250));
                    return;
                } catch (TransportException e) {
                    assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT);
                }
            }
            throw new AssertionError("rank " + partner + " never reported the message for endpoint " + neverOpened);
        } else {
            c.recv(4_250, buf, 0, 64, T);
            verify(buf, 0, 64, 11, "message after the one for the closed endpoint");
            assertThat(MpiRuntime.get().counterValues().get(dropped)).isGreaterThan(droppedBefore);
            assertThat(reported).as("a late message for a closed endpoint is nobody's error").isEmpty();
            c.send(4_252, buf, 0, 8, T);
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).until(() -> !reported.isEmpty());
            assertThat(reported.get(0).getMessage()).contains("endpoint " + neverOpened)
                    .contains("no endpoint with that id was ever opened");
            c.send(4_251, buf, 0, 8, T);
        }
    }

    @Test
    void f02_theQueueBoundDropsAndReportsInsteadOfGrowing() {
        needRanks(2);
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        ConnectionManager m = new MpiTransportProvider().create(TransportConfig.builder().name("f02").defaultTimeout(T)
                .property(MpiSettings.MAX_QUEUED_MESSAGES, "16").errorHandler(reported::add).build());
        managers.add(m);
        List<String> addrs = exchange(m);
        int partner = rank() ^ 1;
        if (partner >= size()) {
            return;
        }
        Connection c = m.connection(addrs.get(partner));
        HostBuffer buf = buffer(64);
        if ((rank() & 1) == 0) {
            for (int i = 0; i < 40; i++) {
                Patterns.fill(buf, 0, 64, i);
                c.send(4_300, buf, 0, 64, T); // eager: returns before the partner receives
            }
            c.recv(4_302, buf, 0, 8, T); // the partner drained its queue
            c.send(4_301, buf, 0, 64, T);
        } else {
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(20)).until(() -> !reported.isEmpty());
            assertThat(reported.get(0).getMessage()).contains("queue bound reached");
            for (int i = 0; i < 16; i++) {
                c.recv(4_300, buf, 0, 64, T);
                verify(buf, 0, 64, i, "queued message " + i);
            }
            assertThatThrownBy(() -> c.recv(4_300, buf, 0, 64, Duration.ofMillis(300)))
                    .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                            .isEqualTo(ErrorCode.TIMEOUT));
            c.send(4_302, buf, 0, 8, T);
            c.recv(4_301, buf, 0, 64, T); // below the bound again: served
        }
    }

    private static long[] contribution(int rank, int round) {
        long[] v = new long[rank + round % 3]; // ranks contribute different lengths, some none
        for (int i = 0; i < v.length; i++) {
            v[i] = rank * 1_000_000L + round * 1_000L + i;
        }
        return v;
    }

    @Test
    void l01_theProvidersLauncherKnowsTheRankAndFormsGroups() {
        dev.kvtransfer.api.transport.RankLauncher l = new MpiTransportProvider().launcher().orElseThrow();
        assertThat(l.launchedRank()).isEqualTo(MpiRuntime.get().worldRank());
        assertThat(l.launchedSize()).isEqualTo(MpiRuntime.get().worldSize());
        // the demo's shape: context ranks first, status groups per instance
        int ctx = Math.max(1, size() / 2);
        boolean isCtx = rank() < ctx;
        try (dev.kvtransfer.api.sync.GroupComm g = l.group(isCtx ? 0 : 1, rank(), T)) {
            assertThat(g.size()).isEqualTo(isCtx ? ctx : size() - ctx);
            assertThat(g.rank()).isEqualTo(isCtx ? rank() : rank() - ctx);
            List<long[]> all = g.allgather(new long[] {rank()}, T);
            for (int i = 0; i < all.size(); i++) {
                assertThat(all.get(i)).containsExactly(isCtx ? i : i + ctx);
            }
        }
    }

    @Test
    void g01_allgatherOverTheWorldHasEveryMembersValues() {
        assertThat(world.size()).isEqualTo(MpiRuntime.get().worldSize());
        for (int round = 0; round < 20; round++) {
            List<long[]> all = world.allgather(contribution(world.rank(), round), T);
            assertThat(all).hasSize(world.size());
            for (int r = 0; r < all.size(); r++) {
                assertThat(all.get(r)).as("round %d member %d", round, r).isEqualTo(contribution(r, round));
            }
        }
    }

    @Test
    void g02_splitGroupsAreOrderedByKey() {
        // color = rank % 2 (two groups), key = -rank: members ordered by descending world rank.
        int rank = rank();
        try (MpiGroupComm g = MpiGroupComm.split(rank % 2, -rank, T)) {
            int[] members = java.util.stream.IntStream.range(0, size()).filter(r -> r % 2 == rank % 2)
                    .boxed().sorted((x, y) -> Integer.compare(y, x)).mapToInt(Integer::intValue).toArray();
            assertThat(g.size()).isEqualTo(members.length);
            assertThat(members[g.rank()]).isEqualTo(rank);
            List<long[]> all = g.allgather(new long[] {rank, rank * 10L, -rank}, T);
            for (int i = 0; i < members.length; i++) {
                int r = members[i];
                assertThat(all.get(i)).isEqualTo(new long[] {r, r * 10L, -r});
            }
        }
    }

    @Test
    void g03_anAllgatherThatTimedOutIsFinishedByTheNextCallSoMembersStayInStep() {
        needRanks(2);
        // Rank 0 calls first, alone, and times out; the others arrive later. Rank 0's next call first finishes
        // that round; the others' first round carries rank 0's early values and their second its new ones.
        try (MpiGroupComm g = MpiGroupComm.split(0, rank(), T)) {
            if (rank() == 0) {
                long start = System.nanoTime();
                assertThatThrownBy(() -> g.allgather(new long[] {-1}, Duration.ofMillis(200)))
                        .isInstanceOfSatisfying(KvTransferException.class,
                                e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
                assertThat(Duration.ofNanos(System.nanoTime() - start)).isBetween(Duration.ofMillis(190),
                        Duration.ofSeconds(5));
                barrier();
                List<long[]> second = g.allgather(new long[] {-2}, T);
                assertThat(second.get(0)).isEqualTo(new long[] {-2});
            } else {
                barrier();
                List<long[]> first = g.allgather(new long[] {rank()}, T);
                assertThat(first.get(0)).isEqualTo(new long[] {-1});
                List<long[]> second = g.allgather(new long[] {rank()}, T);
                assertThat(second.get(0)).isEqualTo(new long[] {-2});
                assertThat(Arrays.stream(second.get(rank())).boxed().toList()).containsExactly((long) rank());
            }
        }
    }

    @Test
    void s01_noRankListensOnASocketBeyondLoopback() throws Exception {
        // Open MPI 4.1's TCP BTL listens on the wildcard address whatever btl_tcp_if_include says. A job launched
        // shared-memory only (as the demo's ranks are) listens on no TCP socket at all; a job that keeps the TCP BTL
        // (the 2-rank conformance job, for MPI_Comm_connect across jobs, rule 1.23) has the launcher's bind shim
        // preloaded, so its listeners are on loopback.
        manager(Map.of());
        List<String> listening = listeningSockets("self");
        assertThat(listening).as("TCP sockets rank %d listens on (hex address:port, as /proc shows them)", rank())
                .allMatch(MpiCrossRankTest::loopback);
        if (!Boolean.getBoolean("mpi.test.sharedMemoryOnly")) {
            assertThat(listening).as("the TCP BTL's listeners of rank %d", rank()).isNotEmpty();
        }
    }

    @Test
    void s02_mpirunListensOnLoopbackOnly() throws Exception {
        // mpirun's out-of-band listener binds 0.0.0.0 and [::] in Open MPI 4.1 whatever oob_tcp_if_include says; the
        // launcher preloads a shim that moves those binds onto loopback. A rank of a local launch is mpirun's child.
        ProcessHandle parent = ProcessHandle.current().parent().orElseThrow();
        String command = parent.info().command().orElse("?");
        assertThat(command).as("the parent of rank %d", rank()).matches(".*/(mpirun|orterun|mpiexec)");
        List<String> listening = listeningSockets(Long.toString(parent.pid()));
        assertThat(listening).as("TCP sockets mpirun (pid %d) listens on", parent.pid()).isNotEmpty()
                .allMatch(MpiCrossRankTest::loopback);
    }

    /** @return the local address of every TCP socket of a process ({@code self} or a pid) in the LISTEN state */
    private static List<String> listeningSockets(String process) throws java.io.IOException {
        Set<String> inodes = new HashSet<>();
        try (java.nio.file.DirectoryStream<java.nio.file.Path> fds =
                     java.nio.file.Files.newDirectoryStream(java.nio.file.Path.of("/proc", process, "fd"))) {
            for (java.nio.file.Path fd : fds) {
                try {
                    String target = java.nio.file.Files.readSymbolicLink(fd).toString();
                    if (target.startsWith("socket:[")) {
                        inodes.add(target.substring(8, target.length() - 1));
                    }
                } catch (java.io.IOException closedMeanwhile) {
                    // an fd of the listing itself, or one closed since
                }
            }
        }
        List<String> out = new ArrayList<>();
        for (String table : List.of("tcp", "tcp6")) {
            List<String> lines = java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc", process, "net", table));
            for (String line : lines.subList(1, lines.size())) {
                String[] f = line.trim().split("\\s+");
                if (f[3].equals("0A") && inodes.contains(f[9])) {
                    out.add(f[1]);
                }
            }
        }
        return out;
    }

    /**
     * @return whether a /proc address (IPv4 as one host-order word, IPv6 as four) is 127.0.0.0/8, ::1, or
     *         ::ffff:127.0.0.0/104 (a JVM's IPv4 socket on a dual-stack socket)
     */
    private static boolean loopback(String hexAddressAndPort) {
        String a = hexAddressAndPort.substring(0, hexAddressAndPort.indexOf(':'));
        if (a.length() == 8) {
            return a.endsWith("7F");
        }
        return a.equals("00000000000000000000000001000000")
                || (a.startsWith("0000000000000000FFFF0000") && a.endsWith("7F"));
    }

    @Test
    void z01_aMessageAboveTwoGibibytesIsChunkedAndExact() throws Exception {
        needRanks(2);
        Assumptions.assumeTrue(Boolean.getBoolean("mpi.test.big"), "the 2.5 GiB message runs in its own job"
                + " (-Dmpi.test.big=true, MpiConformanceIT when MemAvailable > 7 GiB)");
        long big = (5L << 30) / 2;
        ConnectionManager m = manager(Map.of());
        List<String> addrs = exchange(m);
        if (rank() > 1) {
            return;
        }
        Connection c = m.connection(addrs.get(1 - rank()));
        try (HostBuffer buf = HostBuffer.allocate(big + 3)) {
            long start = System.nanoTime();
            if (rank() == 0) {
                Patterns.fill(buf, 3, big, 2_500);
                double fill = (System.nanoTime() - start) / 1e9;
                start = System.nanoTime();
                c.send(9_900, buf, 3, big, Duration.ofSeconds(90)); // odd offset: unaligned source
                System.out.printf("2.5 GiB message: fill %.2f s, send %.2f s%n", fill,
                        (System.nanoTime() - start) / 1e9);
            } else {
                c.recv(9_900, buf, 3, big, Duration.ofSeconds(90));
                double secs = (System.nanoTime() - start) / 1e9;
                start = System.nanoTime();
                verify(buf, 3, big, 2_500, "2.5 GiB message");
                System.out.printf("2.5 GiB message received (%.2f s, including the sender's fill) and verified"
                        + " (%.2f s)%n", secs, (System.nanoTime() - start) / 1e9);
            }
        }
    }
}
