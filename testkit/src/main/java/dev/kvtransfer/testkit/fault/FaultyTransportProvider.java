package dev.kvtransfer.testkit.fault;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.LockSupport;

/**
 * Turns any transport into a faulty one on command: a wrapping provider (same name and capabilities as the
 * real one, so instances built on it interoperate with plain ones) whose managers apply the armed
 * {@link Faults} to every send and connect — drop, duplicate, delay, reorder within a tag, corrupt one byte,
 * truncate, disconnect mid-message, stall, refuse connects. Receives, one-sided writes and everything else pass
 * through unchanged: faults happen on the sending side, where a network would lose or mangle a message.
 *
 * <p>A corrupted message is sent from a private copy (the sender's buffer is never changed, as on a real
 * wire). A reordered message waits, per (connection, tag), for the next send of the same tag and goes right
 * after it; a held message whose successor never comes is dropped when the manager closes.
 */
public final class FaultyTransportProvider implements TransportProvider {
    private final TransportProvider delegate;
    private final Faults faults;

    /**
     * Wraps a provider.
     *
     * @param delegate the real transport
     * @param faults   the faults its managers apply
     */
    public FaultyTransportProvider(TransportProvider delegate, Faults faults) {
        this.delegate = Objects.requireNonNull(delegate, "delegate");
        this.faults = Objects.requireNonNull(faults, "faults");
    }

    @Override
    public String name() {
        return delegate.name();
    }

    @Override
    public boolean isAvailable() {
        return delegate.isAvailable();
    }

    @Override
    public String unavailabilityCause() {
        return delegate.unavailabilityCause();
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return delegate.capabilities();
    }

    @Override
    public HostSupport startHostSupport(TransportConfig config) {
        return delegate.startHostSupport(config);
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        return new Manager(delegate.create(config));
    }

    @Override
    public String toString() {
        return "FaultyTransportProvider{" + delegate + "}";
    }

    /** A manager applying the faults to its sends and connects. */
    private final class Manager implements ConnectionManager {
        private final ConnectionManager real;
        private final Map<String, Conn> conns = new ConcurrentHashMap<>();
        private volatile long stalledUntil;

        Manager(ConnectionManager real) {
            this.real = real;
        }

        @Override
        public String localAddress() {
            return real.localAddress();
        }

        @Override
        public int preferredResponderInfoWaitMicros() {
            return real.preferredResponderInfoWaitMicros();
        }

        @Override
        public int preferredPoolSpinMicros() {
            return real.preferredPoolSpinMicros();
        }

        @Override
        public Duration defaultTimeout() {
            return real.defaultTimeout();
        }

        @Override
        public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
            Connection c = real.pollConnect(tag, buffer, offset, length, wait);
            return c == null ? null : wrap(c);
        }

        @Override
        public Connection connection(String address) {
            Fault f = faults.match(new Fault.Message(real.localAddress(), address, 0, 0), true);
            if (f != null) {
                throw new TransportException(ErrorCode.NETWORK, "connect from " + real.localAddress() + " to "
                        + address + " refused (injected fault)");
            }
            return wrap(real.connection(address));
        }

        private Conn wrap(Connection c) {
            // A transport may replace its connection object for a peer (after a peer loss, or a connection it
            // closed): the wrapper follows the real object, dropping what the old one held back.
            return conns.compute(c.peer(), (k, old) -> {
                if (old != null && old.real == c) {
                    return old;
                }
                if (old != null) {
                    old.releaseHeld();
                }
                return new Conn(this, c);
            });
        }

        @Override
        public RegisteredRegion register(MemoryBuffer memory) {
            return real.register(memory);
        }

        @Override
        public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
            return real.register(memory, writers);
        }

        @Override
        public boolean oneCopyWritesFrom(String address) {
            return real.oneCopyWritesFrom(address);
        }

        @Override
        public boolean isRunning() {
            return real.isRunning();
        }

        @Override
        public void close() {
            for (Conn c : conns.values()) {
                c.releaseHeld();
            }
            real.close();
        }

        @Override
        public String toString() {
            return "Faulty{" + real + "}";
        }
    }

    /** A connection applying the faults to its sends. */
    private final class Conn implements Connection {
        private final Manager owner;
        private final Connection real;
        /** Per tag, a message held back by REORDER (an off-heap copy). */
        private final Map<Integer, Held> held = new ConcurrentHashMap<>();

        Conn(Manager owner, Connection real) {
            this.owner = owner;
            this.real = real;
        }

        @Override
        public Duration defaultTimeout() {
            return real.defaultTimeout();
        }

        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            long now = System.nanoTime();
            if (owner.stalledUntil - now > 0) {
                park(owner.stalledUntil - now);
            }
            Fault f = faults.match(new Fault.Message(owner.localAddress(), real.peer(), tag, length), false);
            if (f == null) {
                real.send(tag, buffer, offset, length, timeout);
                flushHeld(tag, timeout);
                return;
            }
            switch (f.kind()) {
                case DROP -> {
                    // Lost on the wire.
                }
                case DUPLICATE -> {
                    real.send(tag, buffer, offset, length, timeout);
                    real.send(tag, buffer, offset, length, timeout);
                }
                case DELAY -> {
                    park(f.duration().toNanos());
                    real.send(tag, buffer, offset, length, timeout);
                }
                case STALL -> {
                    owner.stalledUntil = System.nanoTime() + f.duration().toNanos();
                    park(f.duration().toNanos());
                    real.send(tag, buffer, offset, length, timeout);
                }
                case REORDER -> held.put(tag, new Held(buffer, offset, length));
                case CORRUPT -> {
                    try (Held copy = new Held(buffer, offset, length)) {
                        if (length > 0) {
                            long at = copy.address + (f.corruptAt() == Fault.MIDDLE ? length / 2
                                    : Math.min(f.corruptAt(), length - 1));
                            MemoryAccess.putByte(at, (byte) (MemoryAccess.getByte(at) ^ 0x40));
                        }
                        real.send(tag, copy.view(), 0, length, timeout);
                    }
                }
                case TRUNCATE -> real.send(tag, buffer, offset, length / 2, timeout);
                case DISCONNECT -> {
                    Thread sender = new Thread(() -> {
                        try {
                            real.send(tag, buffer, offset, length, timeout);
                        } catch (RuntimeException e) {
                            // Expected: the manager closes under it.
                        }
                    }, "fault-disconnect");
                    sender.setDaemon(true);
                    sender.start();
                    owner.close();
                    try {
                        sender.join(timeout.toMillis() + 1_000);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    throw new TransportException(ErrorCode.PEER_LOST, "the sending manager " + owner.localAddress()
                            + " was closed mid-message (injected fault)");
                }
                default -> throw new IllegalStateException("fault " + f.kind() + " does not apply to a send");
            }
        }

        private void flushHeld(int tag, Duration timeout) {
            Held h = held.remove(tag);
            if (h != null) {
                try (h) {
                    real.send(tag, h.view(), 0, h.length, timeout);
                }
            }
        }

        void releaseHeld() {
            for (Held h : held.values()) {
                h.close();
            }
            held.clear();
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            real.recv(tag, buffer, offset, length, timeout);
        }

        @Override
        public void write(WriteBatch batch, Duration timeout) {
            long now = System.nanoTime();
            if (owner.stalledUntil - now > 0) {
                park(owner.stalledUntil - now);
            }
            real.write(batch, timeout);
        }

        @Override
        public boolean writeSummed(WriteBatch batch, Duration timeout, int[] crc32c) {
            long now = System.nanoTime();
            if (owner.stalledUntil - now > 0) {
                park(owner.stalledUntil - now);
            }
            return real.writeSummed(batch, timeout, crc32c);
        }

        @Override
        public String peer() {
            return real.peer();
        }

        @Override
        public int copiesPerByte(long length) {
            return real.copiesPerByte(length);
        }

        @Override
        public int writeCopiesPerByte(long length) {
            return real.writeCopiesPerByte(length);
        }
    }

    private static void park(long nanos) {
        long end = System.nanoTime() + nanos;
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            LockSupport.parkNanos(left);
        }
    }

    /** An off-heap copy of a message. */
    private static final class Held implements AutoCloseable {
        final long address;
        final long length;
        private boolean freed;

        Held(MemoryBuffer src, long offset, long length) {
            if (src.kind() == MemoryKind.DEVICE) {
                throw new UnsupportedOperationException("fault injection copies host memory only");
            }
            this.length = length;
            this.address = MemoryAccess.allocate(Math.max(1, length));
            MemoryAccess.copy(src.address() + offset, address, length);
        }

        MemoryBuffer view() {
            return new HeldView(this);
        }

        @Override
        public synchronized void close() {
            if (!freed) {
                freed = true;
                MemoryAccess.free(address);
            }
        }
    }

    /** A non-owning MemoryBuffer over a held copy. */
    private record HeldView(Held h) implements MemoryBuffer {
        @Override
        public long address() {
            return h.address;
        }

        @Override
        public long size() {
            return h.length;
        }

        @Override
        public MemoryKind kind() {
            return MemoryKind.HOST;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            throw new UnsupportedOperationException("not needed");
        }

        @Override
        public java.nio.ByteBuffer asByteBuffer() {
            return MemoryAccess.byteBuffer(h.address, (int) h.length);
        }

        @Override
        public void close() {
            // The Held owns the memory.
        }
    }
}
