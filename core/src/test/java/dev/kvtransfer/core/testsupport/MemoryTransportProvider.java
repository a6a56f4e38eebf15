package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * core's own in-test transport ("memory"): managers of one JVM reach each other by address; a message is
 * copied into a heap array on send and out on receive (test code, not a hot path). One inbox per manager, a
 * FIFO of (sender, tag, bytes); a receive takes the first message of its tag (from its peer, or from anyone
 * for recvConnect). Honours deadlines and close. Core cannot use the testkit's loopback transport (testkit
 * depends on core), hence this one.
 */
public final class MemoryTransportProvider implements TransportProvider {
    static final Map<String, Manager> FABRIC = new ConcurrentHashMap<>();
    private static final AtomicInteger NEXT = new AtomicInteger();

    @Override
    public String name() {
        return "memory";
    }

    @Override
    public boolean isAvailable() {
        return true;
    }

    @Override
    public String unavailabilityCause() {
        return null;
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return Set.of();
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        Manager m = new Manager("memory://" + NEXT.incrementAndGet(), config.defaultTimeout());
        FABRIC.put(m.address, m);
        return m;
    }

    private record Msg(String from, int tag, byte[] bytes) {
    }

    static final class Manager implements ConnectionManager {
        final String address;
        final Duration defaultTimeout;
        final ReentrantLock lock = new ReentrantLock();
        final Condition arrived = lock.newCondition();
        final LinkedList<Msg> inbox = new LinkedList<>();
        final Map<String, Conn> conns = new ConcurrentHashMap<>();
        volatile boolean closed;

        Manager(String address, Duration defaultTimeout) {
            this.address = address;
            this.defaultTimeout = defaultTimeout;
        }

        void deliver(Msg m) {
            lock.lock();
            try {
                if (closed) {
                    throw new TransportException(ErrorCode.PEER_LOST, "peer " + address + " is closed");
                }
                inbox.add(m);
                arrived.signalAll();
            } finally {
                lock.unlock();
            }
        }

        Msg take(String from, int tag, Duration timeout) {
            long deadline = System.nanoTime() + timeout.toNanos();
            lock.lock();
            try {
                while (true) {
                    if (closed) {
                        throw new TransportClosedException(address + " closed");
                    }
                    for (Iterator<Msg> it = inbox.iterator(); it.hasNext(); ) {
                        Msg m = it.next();
                        if (m.tag == tag && (from == null || m.from.equals(from))) {
                            it.remove();
                            return m;
                        }
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        throw new TransportException(ErrorCode.TIMEOUT, address + ": nothing on tag " + tag
                                + (from == null ? "" : " from " + from) + " within " + timeout.toMillis() + " ms");
                    }
                    try {
                        arrived.awaitNanos(left);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new TransportException(ErrorCode.NETWORK, "interrupted");
                    }
                }
            } finally {
                lock.unlock();
            }
        }

        @Override
        public String localAddress() {
            return address;
        }

        @Override
        public Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length) {
            return recvConnect(tag, buffer, offset, length, Duration.ofDays(1));
        }

        @Override
        public Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            Msg m = take(null, tag, timeout);
            copyOut(m, buffer, offset, length);
            return connection(m.from);
        }

        @Override
        public List<Connection> getConnections(CommState peerInstance) {
            List<Connection> out = new ArrayList<>();
            for (String a : peerInstance.addresses()) {
                out.add(connection(a));
            }
            return out;
        }

        @Override
        public Connection connection(String addr) {
            if (closed) {
                throw new TransportClosedException(address + " closed");
            }
            return conns.computeIfAbsent(addr, a -> new Conn(this, a));
        }

        @Override
        public boolean isRunning() {
            return !closed;
        }

        @Override
        public void close() {
            lock.lock();
            try {
                closed = true;
                arrived.signalAll();
            } finally {
                lock.unlock();
            }
            FABRIC.remove(address);
        }
    }

    static void copyOut(Msg m, MemoryBuffer buffer, long offset, long length) {
        if (m.bytes.length != length) {
            throw new TransportException(ErrorCode.MALFORMED, "message on tag " + m.tag + " has " + m.bytes.length
                    + " bytes, receive expected " + length);
        }
        ByteBuffer bb = buffer.slice(offset, length).asByteBuffer();
        bb.put(m.bytes);
    }

    static final class Conn implements Connection {
        final Manager self;
        final String peer;

        Conn(Manager self, String peer) {
            this.self = self;
            this.peer = peer;
        }

        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length) {
            send(tag, buffer, offset, length, self.defaultTimeout);
        }

        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            if (self.closed) {
                throw new TransportClosedException(self.address + " closed");
            }
            Manager target = FABRIC.get(peer);
            if (target == null) {
                throw new TransportException(ErrorCode.PEER_LOST, "no manager at " + peer);
            }
            byte[] bytes = new byte[(int) length];
            buffer.slice(offset, length).asByteBuffer().get(bytes);
            target.deliver(new Msg(self.address, tag, bytes));
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length) {
            recv(tag, buffer, offset, length, self.defaultTimeout);
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            copyOut(self.take(peer, tag, timeout), buffer, offset, length);
        }

        @Override
        public String peer() {
            return peer;
        }
    }
}
