package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/** Transport checks run pairwise (rank 2k with 2k+1) under mpirun; every transfer verifies its bytes. */
final class TransportChecks {
    private static final Duration T = Duration.ofSeconds(30);

    private TransportChecks() {
    }

    static List<MpiCheck> all() {
        return List.of(
                check("sizes-exact", TransportChecks::sizes),
                check("chunking-lowered-limit", TransportChecks::chunking),
                check("recv-posted-before-send", TransportChecks::recvPostedFirst),
                check("small-sends-complete-before-recv", TransportChecks::smallSendsComplete),
                check("order-per-tag", TransportChecks::orderPerTag),
                check("tags-do-not-mix", TransportChecks::tagsDoNotMix),
                check("recvConnect-returns-sender", TransportChecks::recvConnect),
                check("threads-both-directions-at-once", TransportChecks::bothDirections),
                check("getConnections-in-rank-order", TransportChecks::getConnections),
                check("length-mismatch-malformed", TransportChecks::lengthMismatch),
                check("recv-deadline-timeout", TransportChecks::recvTimeout),
                check("close-wakes-blocked-calls", TransportChecks::closeWakes),
                check("after-close-calls-fail", TransportChecks::afterClose),
                check("one-manager-per-process", TransportChecks::oneManager));
    }

    interface Body {
        void run(MpiCheckContext ctx) throws Exception;
    }

    static MpiCheck check(String name, Body body) {
        return new MpiCheck() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public void run(MpiCheckContext ctx) throws Exception {
                body.run(ctx);
            }
        };
    }

    static void require(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void verify(MemoryBuffer buffer, long offset, long length, long seed, String what) {
        long bad = Patterns.firstMismatch(buffer, offset, length, seed);
        require(bad < 0, what + ": bytes differ at offset " + bad + " of " + length);
    }

    static TransportException expectFailure(ErrorCode code, Runnable call, String what) {
        try {
            call.run();
        } catch (TransportException e) {
            require(e.code() == code, what + ": expected " + code + " but got " + e.code() + ": " + e.getMessage());
            return e;
        }
        throw new AssertionError(what + ": expected " + code + " but the call succeeded");
    }

    // 0 B, 1 B, odd sizes around page and chunk edges, 1 MiB, 64 MiB, both directions; distinct data tags.
    static final long[] SIZES = {0, 1, 7, 4095, 4097, 65_537, 1L << 20, (1L << 20) + 3, 64L << 20};

    private static void sizes(MpiCheckContext ctx) {
        int partner = ctx.partner();
        if (partner < 0) {
            return;
        }
        exchangeSizes(ctx.manager(), partner, ctx.rank() < partner, SIZES, 11);
        exchangeSizes(ctx.manager(), partner, ctx.rank() > partner, SIZES, 12);
    }

    static void exchangeSizes(ConnectionManager m, int partner, boolean sender, long[] sizes, long seedBase) {
        Connection c = m.connection(Integer.toString(partner));
        for (int i = 0; i < sizes.length; i++) {
            long n = sizes[i];
            int tag = Tags.FIRST_DATA_TAG + 100 + i;
            // a guard byte after the message: a receive must not write past its length
            try (HostBuffer buf = HostBuffer.allocate(n + 1)) {
                long seed = seedBase * 1000 + i;
                if (sender) {
                    Patterns.fill(buf, 0, n, seed);
                    c.send(tag, buf, 0, n, T);
                } else {
                    buf.slice(n, 1).asByteBuffer().put(0, (byte) 0x5A);
                    c.recv(tag, buf, 0, n, T);
                    verify(buf, 0, n, seed, "message of " + n + " bytes on tag " + tag);
                    require(buf.slice(n, 1).asByteBuffer().get(0) == 0x5A, "byte after a " + n
                            + "-byte message was overwritten");
                }
            }
        }
    }

    // mpi.maxMessageBytes = 4096: sizes around 1..3 chunks, exact multiples (empty final chunk), a mismatch
    // that is only visible at the last chunk, and the tag staying usable after it.
    private static void chunking(MpiCheckContext ctx) {
        ConnectionManager m = ctx.reopen(Map.of(MpiConnectionManager.MAX_MESSAGE_BYTES, "4096"));
        try {
            int partner = ctx.partner();
            if (partner < 0) {
                return;
            }
            long[] sizes = {4095, 4096, 4097, 8192, 8193, 12_287, (1L << 20) + 5};
            exchangeSizes(m, partner, ctx.rank() < partner, sizes, 21);
            exchangeSizes(m, partner, ctx.rank() > partner, sizes, 22);
            Connection c = m.connection(Integer.toString(partner));
            int tag = Tags.FIRST_DATA_TAG + 300;
            try (HostBuffer buf = HostBuffer.allocate(3 * 4096 + 100)) {
                if (ctx.rank() < partner) {
                    Patterns.fill(buf, 0, 3 * 4096, 31);
                    c.send(tag, buf, 0, 3 * 4096, T);       // 3 full chunks + empty final
                    c.send(tag, buf, 0, 2 * 4096 + 10, T);  // 2 full chunks + 10
                    Patterns.fill(buf, 0, 777, 32);
                    c.send(tag, buf, 0, 777, T);             // the tag must still be in step
                } else {
                    TransportException e = expectFailure(ErrorCode.MALFORMED,
                            () -> c.recv(tag, buf, 0, 2 * 4096, T), "recv 8192 of a 12288-byte message");
                    require(e.getMessage().contains("length mismatch"), "message names the mismatch: "
                            + e.getMessage());
                    expectFailure(ErrorCode.MALFORMED, () -> c.recv(tag, buf, 0, 2 * 4096 + 11, T),
                            "recv 8203 of an 8202-byte message");
                    c.recv(tag, buf, 0, 777, T);
                    verify(buf, 0, 777, 32, "message after two drained mismatches");
                }
            }
        } finally {
            ctx.reopen(Map.of());
        }
    }

    // Protocol control messages (id, info size, info, ready) go out before the peer posts its receive: a send
    // of up to mpi.eagerBytes must complete with no receive posted (testkit rule required_03).
    private static void smallSendsComplete(MpiCheckContext ctx) {
        int partner = ctx.partner();
        long[] sizes = {8, 1, 4096, 8192, 0};
        int tag = Tags.ID_TAG;
        try (HostBuffer buf = HostBuffer.allocate(8192)) {
            if (partner >= 0 && ctx.rank() < partner) {
                for (int i = 0; i < sizes.length; i++) {
                    Patterns.fill(buf, 0, sizes[i], 70 + i);
                    c(ctx, partner).send(tag, buf, 0, sizes[i], Duration.ofSeconds(5));
                }
            }
            ctx.barrier(); // the receiver posts nothing before every send above returned
            if (partner >= 0 && ctx.rank() > partner) {
                for (int i = 0; i < sizes.length; i++) {
                    c(ctx, partner).recv(tag, buf, 0, sizes[i], T);
                    verify(buf, 0, sizes[i], 70 + i, "eager message of " + sizes[i] + " bytes");
                }
            }
        }
    }

    // The receiver is already waiting (parked in its poll loop) when the sender starts (rule required_02).
    private static void recvPostedFirst(MpiCheckContext ctx) throws Exception {
        int partner = ctx.partner();
        long size = (1L << 20) + 3;
        int tag = Tags.FIRST_DATA_TAG + 450;
        try (HostBuffer buf = HostBuffer.allocate(size)) {
            Thread receiver = null;
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            if (partner >= 0 && ctx.rank() > partner) {
                receiver = new Thread(() -> outcome.set(capture(() -> c(ctx, partner).recv(tag, buf, 0, size, T))),
                        "early-recv");
                receiver.start();
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (!parked(receiver) && System.nanoTime() < until) {
                    LockSupport.parkNanos(1_000_000);
                }
                // Best effort: under heavy load the poller may be sampled while RUNNABLE inside MPI_Test. Failing
                // here would free the buffer under a posted receive, so go on either way; the receive is posted.
                if (!parked(receiver)) {
                    System.err.println("recvPostedFirst: receiver not seen parked within 10 s (" + receiver.getState()
                            + "), continuing");
                }
            }
            ctx.barrier();
            if (partner >= 0 && ctx.rank() < partner) {
                Patterns.fill(buf, 0, size, 450);
                c(ctx, partner).send(tag, buf, 0, size, T);
            }
            if (receiver != null) {
                receiver.join(30_000);
                require(!receiver.isAlive() && outcome.get() == null, "early receive ended with " + outcome.get());
                verify(buf, 0, size, 450, "message into an early receive");
            }
        }
    }

    private static Connection c(MpiCheckContext ctx, int rank) {
        return ctx.manager().connection(Integer.toString(rank));
    }

    private static void orderPerTag(MpiCheckContext ctx) {
        int partner = ctx.partner();
        if (partner < 0) {
            return;
        }
        Connection c = ctx.manager().connection(Integer.toString(partner));
        int tag = Tags.FIRST_DATA_TAG + 400;
        int count = 200;
        try (HostBuffer buf = HostBuffer.allocate(8L * count)) {
            if (ctx.rank() < partner) {
                for (int i = 0; i < count; i++) {
                    buf.asByteBuffer().putLong(8 * i, i);
                    c.send(tag, buf, 8L * i, 8, T);
                }
            } else {
                for (int i = 0; i < count; i++) {
                    c.recv(tag, buf, 0, 8, T);
                    long got = buf.asByteBuffer().getLong(0);
                    require(got == i, "message " + i + " on tag " + tag + " arrived as " + got);
                }
            }
        }
    }

    // Control tag 0 (control communicator, MPI tag 0) and data tag FIRST_DATA_TAG (data communicator,
    // MPI tag 0) share an MPI tag number; plus two data tags. Received in the reverse order of sending.
    private static void tagsDoNotMix(MpiCheckContext ctx) {
        int partner = ctx.partner();
        if (partner < 0) {
            return;
        }
        Connection c = ctx.manager().connection(Integer.toString(partner));
        int[] tags = {0, Tags.FIRST_DATA_TAG, Tags.FIRST_DATA_TAG + 1, Tags.ID_TAG, Integer.MAX_VALUE};
        try (HostBuffer buf = HostBuffer.allocate(64 * tags.length)) {
            if (ctx.rank() < partner) {
                for (int i = 0; i < tags.length; i++) {
                    Patterns.fill(buf, 64L * i, 40 + i, 500 + i);
                    c.send(tags[i], buf, 64L * i, 40 + i, T);
                }
            } else {
                for (int i = tags.length - 1; i >= 0; i--) {
                    c.recv(tags[i], buf, 64L * i, 40 + i, T);
                    verify(buf, 64L * i, 40 + i, 500 + i, "message on tag " + tags[i]);
                }
            }
        }
    }

    // Every rank but 0 sends its rank to rank 0 on one tag; rank 0 accepts them with recvConnect and
    // answers through the returned connection.
    private static void recvConnect(MpiCheckContext ctx) {
        ConnectionManager m = ctx.manager();
        int tag = Tags.INFO_TAG;
        int replyTag = Tags.READY_SIGNAL_TAG;
        try (HostBuffer buf = HostBuffer.allocate(16)) {
            if (ctx.rank() == 0) {
                List<String> seen = new ArrayList<>();
                for (int i = 1; i < ctx.size(); i++) {
                    Connection from = m.recvConnect(tag, buf, 0, 8, T);
                    long claimed = buf.asByteBuffer().getLong(0);
                    require(from.peer().equals(Long.toString(claimed)), "recvConnect returned peer "
                            + from.peer() + " for a message sent by rank " + claimed);
                    seen.add(from.peer());
                    buf.asByteBuffer().putLong(8, claimed * 1000 + 7);
                    from.send(replyTag, buf, 8, 8, T);
                }
                require(seen.stream().distinct().count() == ctx.size() - 1, "senders " + seen);
            } else {
                Connection to0 = m.connection("0");
                buf.asByteBuffer().putLong(0, ctx.rank());
                to0.send(tag, buf, 0, 8, T);
                to0.recv(replyTag, buf, 8, 8, T);
                require(buf.asByteBuffer().getLong(8) == ctx.rank() * 1000L + 7, "reply through the"
                        + " recvConnect connection");
            }
        }
    }

    // Two tags per direction, a sender and a receiver thread each, all at once (rules required_07/09).
    private static void bothDirections(MpiCheckContext ctx) throws Exception {
        int partner = ctx.partner();
        if (partner < 0) {
            return;
        }
        Connection c = c(ctx, partner);
        int n = 50;
        int size = 100_003;
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < 2; t++) {
            int tag = Tags.FIRST_DATA_TAG + 500 + t;
            long mySeed = (ctx.rank() * 10L + t) * 1000;
            long peerSeed = (partner * 10L + t) * 1000;
            threads.add(new Thread(() -> errors.add(capture(() -> {
                try (HostBuffer src = HostBuffer.allocate(size)) {
                    for (int i = 0; i < n; i++) {
                        Patterns.fill(src, 0, size, mySeed + i);
                        c.send(tag, src, 0, size, T);
                    }
                }
            })), "send-" + t));
            threads.add(new Thread(() -> errors.add(capture(() -> {
                try (HostBuffer dst = HostBuffer.allocate(size)) {
                    for (int i = 0; i < n; i++) {
                        c.recv(tag, dst, 0, size, T);
                        verify(dst, 0, size, peerSeed + i, "message " + i + " on tag " + tag);
                    }
                }
            })), "recv-" + t));
        }
        threads.forEach(Thread::start);
        for (Thread th : threads) {
            th.join(60_000);
            require(!th.isAlive(), th.getName() + " still running after 60 s");
        }
        for (Throwable e : errors) {
            if (e != null) {
                throw new AssertionError("a transfer thread failed: " + e, e);
            }
        }
    }

    // Rank 0 gets one connection per rank of a CommState listing every rank in reverse order (rule required_15).
    private static void getConnections(MpiCheckContext ctx) {
        int tag = Tags.FIRST_DATA_TAG + 550;
        try (HostBuffer buf = HostBuffer.allocate(16)) {
            if (ctx.rank() == 0) {
                List<String> addresses = new ArrayList<>();
                for (int r = ctx.size() - 1; r >= 1; r--) {
                    addresses.add(Integer.toString(r));
                }
                List<Connection> cs = ctx.manager().getConnections(new dev.kvtransfer.api.model.CommState(
                        MpiTransportProvider.NAME, addresses, -1));
                require(cs.size() == addresses.size(), "one connection per rank");
                for (int i = 0; i < cs.size(); i++) {
                    require(cs.get(i).peer().equals(addresses.get(i)), "connection " + i + " is to "
                            + cs.get(i).peer() + ", not " + addresses.get(i));
                    Patterns.fill(buf, 0, 16, 5500 + Integer.parseInt(addresses.get(i)));
                    cs.get(i).send(tag, buf, 0, 16, T);
                }
            } else {
                c(ctx, 0).recv(tag, buf, 0, 16, T);
                verify(buf, 0, 16, 5500 + ctx.rank(), "message through getConnections");
            }
        }
    }

    private static void lengthMismatch(MpiCheckContext ctx) {
        int partner = ctx.partner();
        if (partner < 0) {
            return;
        }
        Connection c = ctx.manager().connection(Integer.toString(partner));
        int tag = Tags.FIRST_DATA_TAG + 600;
        try (HostBuffer buf = HostBuffer.allocate(256)) {
            if (ctx.rank() < partner) {
                Patterns.fill(buf, 0, 100, 61);
                c.send(tag, buf, 0, 100, T);
                c.send(tag, buf, 0, 100, T);
                Patterns.fill(buf, 0, 50, 62);
                c.send(tag, buf, 0, 50, T);
                c.send(Tags.REASON_TAG, buf, 0, 3, T);
            } else {
                expectFailure(ErrorCode.MALFORMED, () -> c.recv(tag, buf, 0, 64, T), "recv 64 of 100 bytes");
                expectFailure(ErrorCode.MALFORMED, () -> c.recv(tag, buf, 0, 200, T), "recv 200 of 100 bytes");
                c.recv(tag, buf, 0, 50, T);
                verify(buf, 0, 50, 62, "message after two mismatches");
                expectFailure(ErrorCode.MALFORMED, () -> ctx.manager().recvConnect(Tags.REASON_TAG, buf, 0, 4, T),
                        "recvConnect 4 of 3 bytes");
            }
        }
    }

    private static void recvTimeout(MpiCheckContext ctx) {
        Connection c = ctx.manager().connection(Integer.toString(Math.max(ctx.partner(), 0)));
        try (HostBuffer buf = HostBuffer.allocate(8)) {
            long start = System.nanoTime();
            expectFailure(ErrorCode.TIMEOUT, () -> c.recv(Tags.FIRST_DATA_TAG + 700, buf, 0, 8,
                    Duration.ofMillis(200)), "recv nobody sends");
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            require(ms >= 190 && ms < 5_000, "recv with a 200 ms deadline returned after " + ms + " ms");
            expectFailure(ErrorCode.TIMEOUT, () -> ctx.manager().recvConnect(Tags.FIRST_DATA_TAG + 701, buf, 0, 8,
                    Duration.ofMillis(100)), "recvConnect nobody sends");
        }
    }

    // Each rank on its own: a thread blocked in recv and one in recvConnect (30 s deadlines) are woken by close.
    private static void closeWakes(MpiCheckContext ctx) throws Exception {
        ConnectionManager m = ctx.manager();
        Connection c = m.connection(Integer.toString(Math.max(ctx.partner(), 0)));
        try (HostBuffer buf = HostBuffer.allocate(16)) {
            AtomicReference<Throwable> recvOutcome = new AtomicReference<>();
            AtomicReference<Throwable> connectOutcome = new AtomicReference<>();
            Thread r = new Thread(() -> recvOutcome.set(capture(() -> c.recv(Tags.FIRST_DATA_TAG + 800, buf, 0,
                    8, T))), "blocked-recv");
            Thread a = new Thread(() -> connectOutcome.set(capture(() -> m.recvConnect(Tags.FIRST_DATA_TAG + 801,
                    buf, 8, 8, T))), "blocked-recvConnect");
            r.start();
            a.start();
            // Wait (bounded) until each thread is inside its poll loop. Checked per thread, not both at one
            // instant: with 4 oversubscribed ranks a poller spends most of its time RUNNABLE in MPI_Test, and
            // sampling both parked at the same moment failed about one run in three.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            boolean rIn = false;
            boolean aIn = false;
            while (!(rIn && aIn) && System.nanoTime() < until) {
                rIn |= inPollLoop(r);
                aIn |= inPollLoop(a);
                LockSupport.parkNanos(1_000_000);
            }
            require(rIn && aIn, "threads did not enter their blocking calls within 10 s: " + r.getState() + " "
                    + a.getState());
            require(r.isAlive() && a.isAlive(), "a blocked call returned before close: recv " + recvOutcome.get()
                    + ", recvConnect " + connectOutcome.get());
            long start = System.nanoTime();
            m.close();
            r.join(5_000);
            a.join(5_000);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            require(!r.isAlive() && !a.isAlive(), "close did not wake the blocked calls within 5 s");
            require(recvOutcome.get() instanceof TransportClosedException, "recv ended with " + recvOutcome.get());
            require(connectOutcome.get() instanceof TransportClosedException, "recvConnect ended with "
                    + connectOutcome.get());
            require(!m.isRunning(), "isRunning after close");
            expectFailure(ErrorCode.NETWORK, () -> c.send(Tags.FIRST_DATA_TAG + 802, buf, 0, 8, T),
                    "send after close");
            ctx.log("close woke 2 blocked calls in " + ms + " ms");
        } finally {
            ctx.reopen(Map.of());
        }
    }

    // Rule required_14: close is idempotent, every later call fails with TransportClosedException.
    private static void afterClose(MpiCheckContext ctx) {
        ConnectionManager m = ctx.manager();
        Connection c = c(ctx, Math.max(ctx.partner(), 0));
        try (HostBuffer buf = HostBuffer.allocate(8)) {
            m.close();
            m.close();
            require(!m.isRunning(), "isRunning after close");
            for (Runnable call : List.<Runnable>of(
                    () -> c.send(Tags.FIRST_DATA_TAG + 850, buf, 0, 8, T),
                    () -> c.recv(Tags.FIRST_DATA_TAG + 850, buf, 0, 8, T),
                    () -> m.recvConnect(Tags.FIRST_DATA_TAG + 850, buf, 0, 8, T),
                    () -> m.connection("0"))) {
                Throwable t = capture(call);
                require(t instanceof TransportClosedException, "after close: " + t);
            }
        } finally {
            ctx.reopen(Map.of());
        }
    }

    /** The thread is in a wait of the manager (its stack holds a frame of the MPI connection classes). */
    private static boolean inPollLoop(Thread t) {
        for (StackTraceElement f : t.getStackTrace()) {
            if (f.getClassName().startsWith("dev.kvtransfer.mpi.MpiConnection")
                    && (f.getMethodName().equals("await") || f.getMethodName().equals("recvConnect")
                    || f.getMethodName().equals("recv"))) {
                return true;
            }
        }
        return false;
    }

    private static boolean parked(Thread t) {
        Thread.State s = t.getState();
        return s == Thread.State.TIMED_WAITING || s == Thread.State.WAITING;
    }

    private static Throwable capture(Runnable call) {
        try {
            call.run();
            return null;
        } catch (Throwable t) {
            return t;
        }
    }

    private static void oneManager(MpiCheckContext ctx) {
        expectFailure(ErrorCode.NETWORK, () -> ctx.provider().create(ctx.config(Map.of())).close(),
                "a second open manager in one process");
        require(ctx.manager().isRunning(), "the first manager still runs");
        require(ctx.manager().localAddress().equals(Integer.toString(ctx.rank())), "localAddress "
                + ctx.manager().localAddress() + " is the world rank " + ctx.rank());
    }
}
