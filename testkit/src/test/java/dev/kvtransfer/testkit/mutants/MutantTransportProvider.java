package dev.kvtransfer.testkit.mutants;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.MemoryAccess;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.time.Duration;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The loopback transport with one deliberate defect, for proving that the conformance rules catch it (a
 * third-party plugin's likely bugs, one at a time). Each {@link Defect} changes one thing a transport author could
 * get wrong; everything else is loopback's correct behaviour.
 */
public final class MutantTransportProvider implements TransportProvider {
    /** What is broken. */
    public enum Defect {
        /** A timed receive ignores its deadline and interrupts until {@link #release()} (a hung native call). */
        HANG_RECV,
        /** Tags are cut to their low 16 bits on the wire. */
        TAG_TRUNCATED_16,
        /** One bit of every received message of at least 1 MiB is flipped, in its first byte. */
        BIT_FLIP_FIRST,
        /** As {@link #BIT_FLIP_FIRST}, in the middle byte. */
        BIT_FLIP_MIDDLE,
        /** As {@link #BIT_FLIP_FIRST}, in the last byte. */
        BIT_FLIP_LAST,
        /** A receive from a closed peer waits out its deadline and reports TIMEOUT: PEER_LOST is never reported. */
        PEER_LOST_NEVER_REPORTED,
        /** A receive that times out reports NETWORK. */
        TIMEOUT_REPORTED_AS_NETWORK,
        /** A length mismatch is reported as NETWORK instead of MALFORMED. */
        MALFORMED_REPORTED_AS_NETWORK,
        /** Calls on a closed manager throw a plain NETWORK TransportException, not TransportClosedException. */
        CLOSED_REPORTED_AS_NETWORK,
        /**
         * A receive that timed out stays posted: the next message on its tag lands late in the abandoned buffer
         * and is lost to the receive that comes next.
         */
        LATE_BYTE_AFTER_CANCEL,
        /** Declares CROSS_PROCESS without honouring it (loopback reaches only managers of its own JVM). */
        UNHONOURED_CROSS_PROCESS,
        /** Tags are cut to their low 24 bits: requests whose tags differ only above collide. */
        TAG_TRUNCATED_24,
        /** Every manager starts a thread its close does not end. */
        THREAD_LEAK,
        /** Every manager opens a pipe (two descriptors) its close does not close. */
        FD_LEAK,
        /** {@code isAvailable()} throws instead of answering. */
        AVAILABILITY_THROWS,
        /** Nothing: loopback through this wrapper, the control of the transceiver mutants. */
        NONE,
        /** A small message (under {@link #SMALL} bytes) on a data tag is delivered twice: so is a ready signal. */
        CONTROL_DUPLICATED,
        /**
         * Small messages (under {@link #SMALL} bytes) on data tags go through a lane of their own, flushed only when
         * the application next calls the manager: a larger message sent after a ready signal on the same
         * (connection, tag) overtakes it.
         */
        CONTROL_REORDERED,
        /**
         * A refused ready signal (the context side's cancel, status and padding zero) is lost with the refusal that
         * follows it on its (connection, tag).
         */
        CANCEL_DROPPED,
        /** A receive of more than {@link #SMALL} bytes completes normally with only its first half written. */
        SHORT_RECV,
        /** A timed receive waits three times its timeout before it reports TIMEOUT, delivering what comes meanwhile. */
        DEADLINE_OVERSHOT,
        /** Data tags keep only their low 2 bits above the first data tag: requests in flight at once share tags. */
        DATA_TAGS_COLLIDE,
        /** {@code writeSummed} writes every byte but sums each entry's source one byte short (an off-by-one). */
        WRITE_SUM_SHORT
    }

    /** Messages below this many bytes are control messages to the transceiver mutants. */
    static final long SMALL = 512;

    private static final long LARGE = 1L << 20;
    private static volatile CountDownLatch released = new CountDownLatch(1);
    private static final java.util.List<java.io.Closeable> LEAKED = new java.util.concurrent.CopyOnWriteArrayList<>();

    private final Defect defect;
    private final LoopbackTransportProvider real = new LoopbackTransportProvider();

    /** @param defect what to break */
    public MutantTransportProvider(Defect defect) {
        this.defect = defect;
    }

    /** Ends every {@link Defect#HANG_RECV} wait (the mutant tests' cleanup); later hangs wait again. */
    public static void release() {
        CountDownLatch l = released;
        released = new CountDownLatch(1);
        l.countDown();
        for (java.io.Closeable c : LEAKED) {
            try {
                c.close();
            } catch (java.io.IOException ignored) {
                // already closed
            }
        }
        LEAKED.clear();
    }

    @Override
    public String name() {
        return real.name(); // so the suite's rules on its own property prefix see loopback's settings
    }

    @Override
    public boolean isAvailable() {
        if (defect == Defect.AVAILABILITY_THROWS) {
            throw new IllegalStateException("mutant: no libfoo.so");
        }
        return true;
    }

    @Override
    public String unavailabilityCause() {
        return null;
    }

    @Override
    public Set<TransportCapability> capabilities() {
        if (defect == Defect.UNHONOURED_CROSS_PROCESS) {
            java.util.EnumSet<TransportCapability> c = java.util.EnumSet.copyOf(real.capabilities());
            c.add(TransportCapability.CROSS_PROCESS);
            return c;
        }
        return real.capabilities();
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        ConnectionManager m = new Manager(real.create(config));
        if (defect == Defect.THREAD_LEAK) {
            CountDownLatch until = released;
            Thread t = new Thread(() -> {
                try {
                    until.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "mutant-leaked-poller");
            t.setDaemon(true);
            t.start();
        }
        if (defect == Defect.FD_LEAK) {
            try {
                java.nio.channels.Pipe pipe = java.nio.channels.Pipe.open();
                LEAKED.add(pipe.sink());
                LEAKED.add(pipe.source());
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return m;
    }

    private int tag(int tag) {
        return switch (defect) {
            case TAG_TRUNCATED_16 -> tag & 0xFFFF;
            case TAG_TRUNCATED_24 -> tag & 0xFF_FFFF;
            case DATA_TAGS_COLLIDE -> tag >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG
                    ? dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG + (tag & 3) : tag;
            default -> tag;
        };
    }

    private RuntimeException mapped(RuntimeException e) {
        if (!(e instanceof TransportException te)) {
            return e;
        }
        if (defect == Defect.CLOSED_REPORTED_AS_NETWORK && e instanceof dev.kvtransfer.api.transport.TransportClosedException) {
            return new TransportException(ErrorCode.NETWORK, "closed: " + e.getMessage());
        }
        if (defect == Defect.TIMEOUT_REPORTED_AS_NETWORK && te.code() == ErrorCode.TIMEOUT) {
            return new TransportException(ErrorCode.NETWORK, e.getMessage());
        }
        if (defect == Defect.MALFORMED_REPORTED_AS_NETWORK && te.code() == ErrorCode.MALFORMED) {
            return new TransportException(ErrorCode.NETWORK, e.getMessage());
        }
        return e;
    }

    private static void hang() {
        // Deaf to interrupts and deadlines, as a native call stuck in the kernel is.
        while (true) {
            try {
                if (released.await(50, TimeUnit.MILLISECONDS)) {
                    return;
                }
            } catch (InterruptedException ignored) {
                // swallowed on purpose: this is the defect
            }
        }
    }

    private final class Manager implements ConnectionManager {
        private final ConnectionManager m;

        Manager(ConnectionManager m) {
            this.m = m;
        }

        @Override
        public String localAddress() {
            return m.localAddress();
        }

        @Override
        public Duration defaultTimeout() {
            return m.defaultTimeout();
        }

        /** Small messages waiting in their own lane ({@link Defect#CONTROL_REORDERED}), in sending order. */
        private final java.util.List<Held> lane = new java.util.ArrayList<>();

        void hold(Held h) {
            synchronized (lane) {
                lane.add(h);
            }
        }

        /** Sends the small lane's messages, in order (the application called the transport again). */
        void flush() {
            if (defect != Defect.CONTROL_REORDERED) {
                return;
            }
            java.util.List<Held> out;
            synchronized (lane) {
                out = new java.util.ArrayList<>(lane);
                lane.clear();
            }
            for (Held h : out) {
                h.sendAndFree();
            }
        }

        @Override
        public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
            flush();
            try {
                Connection c = m.pollConnect(tag(tag), buffer, offset, length, wait);
                return c == null ? null : new Conn(this, c);
            } catch (RuntimeException e) {
                throw mapped(e);
            }
        }

        @Override
        public Connection connection(String address) {
            flush();
            return new Conn(this, m.connection(address));
        }

        @Override
        public RegisteredRegion register(MemoryBuffer memory) {
            return m.register(memory);
        }

        @Override
        public Set<TransportCapability> capabilities() {
            return MutantTransportProvider.this.capabilities();
        }

        @Override
        public boolean isRunning() {
            return m.isRunning();
        }

        @Override
        public void close() {
            flush();
            m.close();
        }
    }

    /** A small message held in its lane: an off-heap copy and where it goes. */
    private final class Held {
        private final Connection to;
        private final int tag;
        private final long address;
        private final long length;
        private final Duration timeout;

        Held(Connection to, int tag, MemoryBuffer src, long offset, long length, Duration timeout) {
            this.to = to;
            this.tag = tag;
            this.length = length;
            this.timeout = timeout;
            this.address = MemoryAccess.allocate(Math.max(1, length));
            MemoryAccess.copy(src.address() + offset, address, length);
        }

        void sendAndFree() {
            try (dev.kvtransfer.core.memory.HostBufferManager hm = new dev.kvtransfer.core.memory.HostBufferManager();
                 MemoryBuffer b = hm.allocate(Math.max(1, length), dev.kvtransfer.api.memory.MemoryKind.HOST)) {
                MemoryAccess.copy(address, b.address(), length);
                to.send(tag, b, 0, length, timeout);
            } catch (RuntimeException e) {
                // the peer or this manager closed meanwhile: the message is lost, as on a closing transport
            } finally {
                MemoryAccess.free(address);
            }
        }
    }

    private final class Conn implements Connection {
        private final Manager owner;
        private final Connection c;
        /** Per tag, messages still to drop after a dropped cancel ({@link Defect#CANCEL_DROPPED}). */
        private final java.util.Map<Integer, Integer> dropping = new java.util.concurrent.ConcurrentHashMap<>();

        Conn(Manager owner, Connection c) {
            this.owner = owner;
            this.c = c;
        }

        /** A refused ready signal: status and padding zero, 12 + 4 x its block count bytes, and a MAC of 32 or none. */
        private boolean isCancel(MemoryBuffer buffer, long offset, long length) {
            if (length < 12 || buffer.kind() == dev.kvtransfer.api.memory.MemoryKind.DEVICE) {
                return false;
            }
            long a = buffer.address() + offset;
            long mac = length - 12 - 4L * MemoryAccess.getInt(a + 4);
            return MemoryAccess.getInt(a) == 0 && (mac == 0 || mac == 32);
        }

        private boolean mutatedSend(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            boolean control = tag >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG && length < SMALL;
            switch (defect) {
                case CONTROL_DUPLICATED -> {
                    if (control) {
                        c.send(tag(tag), buffer, offset, length, timeout);
                    }
                    return false;
                }
                case CONTROL_REORDERED -> {
                    if (control) {
                        owner.flush(); // the lane keeps its own order
                        owner.hold(new Held(c, tag(tag), buffer, offset, length, timeout));
                        return true;
                    }
                    c.send(tag(tag), buffer, offset, length, timeout);
                    owner.flush(); // the larger message went first
                    return true;
                }
                case CANCEL_DROPPED -> {
                    Integer left = dropping.get(tag);
                    if (left != null) {
                        if (left <= 1) {
                            dropping.remove(tag);
                        } else {
                            dropping.put(tag, left - 1);
                        }
                        return true;
                    }
                    if (tag >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG && isCancel(buffer, offset, length)) {
                        dropping.put(tag, 2); // the refusal's length and text
                        return true;
                    }
                    return false;
                }
                default -> {
                    return false;
                }
            }
        }

        @Override
        public Duration defaultTimeout() {
            return c.defaultTimeout();
        }

        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            try {
                if (!mutatedSend(tag, buffer, offset, length, timeout)) {
                    c.send(tag(tag), buffer, offset, length, timeout);
                }
            } catch (RuntimeException e) {
                throw mapped(e);
            }
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            if (defect == Defect.HANG_RECV) {
                hang();
                // Released by the test's cleanup: the buffer may be gone by now, so touch nothing.
                throw new TransportException(ErrorCode.NETWORK, "mutant released from its hang");
            }
            owner.flush();
            long t0 = System.nanoTime();
            try {
                if (defect == Defect.SHORT_RECV && length > SMALL) {
                    shortRecv(tag, buffer, offset, length, timeout);
                    return;
                }
                c.recv(tag(tag), buffer, offset, length,
                        defect == Defect.DEADLINE_OVERSHOT ? timeout.multipliedBy(3) : timeout);
            } catch (TransportException e) {
                if (defect == Defect.PEER_LOST_NEVER_REPORTED && e.code() == ErrorCode.PEER_LOST) {
                    LockSupport.parkNanos(Math.max(0, timeout.toNanos() - (System.nanoTime() - t0)));
                    throw new TransportException(ErrorCode.TIMEOUT, "recv tag " + tag + ": nothing within "
                            + timeout.toMillis() + " ms");
                }
                if (defect == Defect.LATE_BYTE_AFTER_CANCEL && e.code() == ErrorCode.TIMEOUT) {
                    // The abandoned receive stays posted and takes the next message into the caller's old buffer.
                    Thread late = new Thread(() -> {
                        try {
                            c.recv(tag(tag), buffer, offset, length, Duration.ofSeconds(30));
                        } catch (RuntimeException ignored) {
                            // the manager closed meanwhile
                        }
                    }, "mutant-late-receive");
                    late.setDaemon(true);
                    late.start();
                    LockSupport.parkNanos(20_000_000L); // posted before the caller can post again
                }
                throw mapped(e);
            } catch (RuntimeException e) {
                throw mapped(e);
            }
            if (length >= LARGE) {
                long at = switch (defect) {
                    case BIT_FLIP_FIRST -> 0;
                    case BIT_FLIP_MIDDLE -> length / 2;
                    case BIT_FLIP_LAST -> length - 1;
                    default -> -1;
                };
                if (at >= 0) {
                    long a = buffer.address() + offset + at;
                    MemoryAccess.putByte(a, (byte) (MemoryAccess.getByte(a) ^ 0x10));
                }
            }
        }

        /** Receives the whole message but writes only its first half into the caller's buffer. */
        private void shortRecv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            try (dev.kvtransfer.core.memory.HostBufferManager hm = new dev.kvtransfer.core.memory.HostBufferManager();
                 MemoryBuffer whole = hm.allocate(length, dev.kvtransfer.api.memory.MemoryKind.HOST)) {
                c.recv(tag(tag), whole, 0, length, timeout);
                MemoryAccess.copy(whole.address(), buffer.address() + offset, length / 2);
            }
        }

        @Override
        public void write(WriteBatch batch, Duration timeout) {
            try {
                c.write(batch, timeout);
            } catch (RuntimeException e) {
                throw mapped(e);
            }
        }

        @Override
        public boolean writeSummed(WriteBatch batch, Duration timeout, int[] crc32c) {
            if (defect != Defect.WRITE_SUM_SHORT) {
                return c.writeSummed(batch, timeout, crc32c);
            }
            if (crc32c.length < batch.size()) {
                throw new IllegalArgumentException("crc32c has " + crc32c.length + " slots");
            }
            write(batch, timeout);
            for (int i = 0; i < batch.size(); i++) {
                java.util.zip.CRC32C sum = new java.util.zip.CRC32C();
                long n = Math.max(0, batch.length(i) - 1);
                if (n > 0) {
                    sum.update(batch.source(i).slice(batch.sourceOffset(i), n).asByteBuffer());
                }
                crc32c[i] = (int) sum.getValue();
            }
            return true;
        }

        @Override
        public String peer() {
            return c.peer();
        }

        @Override
        public int copiesPerByte(long length) {
            return c.copiesPerByte(length);
        }

        @Override
        public int writeCopiesPerByte(long length) {
            return c.writeCopiesPerByte(length);
        }
    }
}
