package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.WriteBatch;

import java.time.Duration;
import java.util.Objects;

/** A manager's connection to one peer address on its fabric. Thread-safe (stateless). */
final class LoopbackConnection implements Connection {
    private final LoopbackConnectionManager owner;
    private final String peer;
    private final Duration defaultTimeout;

    LoopbackConnection(LoopbackConnectionManager owner, String peer, Duration defaultTimeout) {
        this.owner = owner;
        this.peer = peer;
        this.defaultTimeout = defaultTimeout;
    }

    @Override
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        owner.send(peer, tag, buffer, offset, length, Objects.requireNonNull(timeout, "timeout"));
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        owner.receive(peer, tag, buffer, offset, length, Objects.requireNonNull(timeout, "timeout"));
    }

    /** Posted: matched as a blocking receive; its end is reported on the manager's posted-receive thread. */
    @Override
    public boolean recvAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                             RecvCompletion done) {
        owner.receiveAsync(peer, tag, buffer, offset, length, timeout, done);
        return true;
    }

    @Override
    public void write(WriteBatch batch, Duration timeout) {
        owner.oneSided().write(this, batch, timeout);
    }

    @Override
    public String peer() {
        return peer;
    }

    /**
     * One pass: a receive that waits is written straight from the sender's buffer (at any size). A message sent
     * before its receive is posted costs two: into an eager buffer, then out (at most {@link #EAGER_LIMIT} bytes, or
     * a larger one whose receive did not come within the rendezvous wait).
     */
    @Override
    public int copiesPerByte(long length) {
        return 1;
    }

    /** The emulated write's data messages are received straight into the registered memory: as a send. */
    @Override
    public int writeCopiesPerByte(long length) {
        return 1;
    }

    @Override
    public String toString() {
        return "LoopbackConnection{" + owner.localAddress() + " -> " + peer + "}";
    }
}
