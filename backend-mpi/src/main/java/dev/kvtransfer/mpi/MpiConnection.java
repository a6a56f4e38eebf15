package dev.kvtransfer.mpi;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;

import java.time.Duration;

/** The connection to one peer rank: MPI needs no handshake, so it is just the rank plus ordering locks. */
final class MpiConnection implements Connection {
    private final MpiConnectionManager manager;
    private final int rank;
    private final String peer;
    /** Held while posting sends, so the chunks of one message are posted back to back. */
    final Object postLock = new Object();
    final TagLocks chunkLocks = new TagLocks();

    MpiConnection(MpiConnectionManager manager, int rank) {
        this.manager = manager;
        this.rank = rank;
        this.peer = Integer.toString(rank);
    }

    int rank() {
        return rank;
    }

    @Override
    public Duration defaultTimeout() {
        return manager.defaultTimeout();
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.send(this, tag, buffer, offset, length, timeout);
    }


    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.recv(this, tag, buffer, offset, length, timeout);
    }

    @Override
    public String peer() {
        return peer;
    }

    @Override
    public String toString() {
        return "MpiConnection{rank " + manager.localAddress() + " -> rank " + rank + "}";
    }
}
