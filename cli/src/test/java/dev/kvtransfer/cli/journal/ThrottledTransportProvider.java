package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.locks.LockSupport;

/**
 * Test transport: another provider whose payload sends (data tags, more than the 1-byte ready signal) each take
 * at least {@code delay} longer, so a transfer is reliably still moving when a test kills its process.
 */
final class ThrottledTransportProvider implements TransportProvider {
    private final TransportProvider delegate;
    private final long delayNanos;

    ThrottledTransportProvider(TransportProvider delegate, Duration delay) {
        this.delegate = delegate;
        this.delayNanos = delay.toNanos();
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
    public ConnectionManager create(TransportConfig config) {
        ConnectionManager m = delegate.create(config);
        return new ConnectionManager() {
            @Override
            public String localAddress() {
                return m.localAddress();
            }

            @Override
            public Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length) {
                return wrap(m.recvConnect(tag, buffer, offset, length));
            }

            @Override
            public Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
                return wrap(m.recvConnect(tag, buffer, offset, length, timeout));
            }

            @Override
            public List<Connection> getConnections(CommState peerInstance) {
                return m.getConnections(peerInstance).stream().map(c -> wrap(c)).toList();
            }

            @Override
            public Connection connection(String address) {
                return wrap(m.connection(address));
            }

            @Override
            public boolean isRunning() {
                return m.isRunning();
            }

            @Override
            public void close() {
                m.close();
            }
        };
    }

    private Connection wrap(Connection c) {
        if (c == null) {
            return null;
        }
        return new Connection() {
            @Override
            public void send(int tag, MemoryBuffer buffer, long offset, long length) {
                throttle(tag, length);
                c.send(tag, buffer, offset, length);
            }

            @Override
            public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
                throttle(tag, length);
                c.send(tag, buffer, offset, length, timeout);
            }

            @Override
            public void recv(int tag, MemoryBuffer buffer, long offset, long length) {
                c.recv(tag, buffer, offset, length);
            }

            @Override
            public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
                c.recv(tag, buffer, offset, length, timeout);
            }

            @Override
            public String peer() {
                return c.peer();
            }
        };
    }

    private void throttle(int tag, long length) {
        if (tag >= Tags.FIRST_DATA_TAG && length > 1) {
            LockSupport.parkNanos(delayNanos);
        }
    }
}
