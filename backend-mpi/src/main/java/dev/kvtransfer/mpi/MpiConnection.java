package dev.kvtransfer.mpi;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;

import java.time.Duration;

/**
 * The connection to one peer endpoint ({@code rank/endpoint@world}): MPI needs no handshake, so it is the channel
 * ({@link MpiLinks.Link}), the peer's MPI rank on it and its endpoint.
 */
final class MpiConnection implements Connection {
    private final MpiConnectionManager manager;
    private final MpiLinks.Link link;
    private final int rank;
    private final int endpoint;
    private final String peer;

    /**
     * @param link     the channel to the peer's process
     * @param rank     the peer's MPI rank on that channel (world rank on link 0, 0 on a link to another world)
     * @param endpoint the peer's endpoint
     * @param peer     the peer's address
     */
    MpiConnection(MpiConnectionManager manager, MpiLinks.Link link, int rank, int endpoint, String peer) {
        this.manager = manager;
        this.link = link;
        this.rank = rank;
        this.endpoint = endpoint;
        this.peer = peer;
    }

    MpiLinks.Link link() {
        return link;
    }

    int rank() {
        return rank;
    }

    int endpoint() {
        return endpoint;
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
    public void write(dev.kvtransfer.api.transport.WriteBatch batch, Duration timeout) {
        manager.write(this, batch, timeout);
    }

    @Override
    public String peer() {
        return peer;
    }

    /**
     * Between two processes of this job (Open MPI 4.1, ob1 over vader, whose single copy is CMA where the kernel
     * allows it): above {@code mpi.eagerBytes} (64 KiB) the payload goes with its own {@code isend} into an
     * {@code imrecv} of the caller's memory, one {@code process_vm_readv}; an inline message up to vader's eager
     * limit (4 KiB) costs five (our bounce copy, vader's copy in, ob1's unexpected-fragment copy, the receive into
     * the agent's scratch, the copy out of it), and up to 64 KiB three (bounce, a CMA get into scratch, copy out). A
     * peer in another job (TCP BTL) or in this process (self BTL): unknown.
     */
    @Override
    public int copiesPerByte(long length) {
        return manager.copiesPerByte(this, length);
    }

    /** Native writes ({@code MPI_Put}, osc rdma over vader): one {@code process_vm_writev}; emulated: as a send. */
    @Override
    public int writeCopiesPerByte(long length) {
        return manager.writeCopiesPerByte(this, length);
    }

    @Override
    public String toString() {
        return "MpiConnection{" + manager.localAddress() + " -> " + peer + "}";
    }
}
