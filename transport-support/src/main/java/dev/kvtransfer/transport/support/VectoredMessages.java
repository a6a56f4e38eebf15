package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.SendCompletion;

import java.time.Duration;

/**
 * A connection that posts one message gathered from, or scattered into, several ranges of host memory: the
 * message's bytes are the ranges' bytes in order, with no copy into or out of a staging buffer (UCX's IOV datatype;
 * over shared memory with CMA, one {@code process_vm_readv} with one iovec per range). A vectored message is an
 * ordinary message of the tag: a plain receive of its total length takes it, and a vectored receive takes a plain
 * message of that length. Both calls have the semantics of {@code Connection.sendAsync} / {@code recvAsync} for a
 * message of the ranges' total length (ordering with the tag's other sends and receives, one completion, deadline,
 * {@code MALFORMED} for a message of another length).
 *
 * <p>{@link EmulatedOneSided} moves a write batch's entries as one such message where both of its ends' connections
 * implement this (announced in its batch header and answered in its go reply), instead of one message per entry.
 */
public interface VectoredMessages {
    /**
     * Posts one message gathered from {@code count} ranges starting at index {@code from} of the arrays.
     *
     * @param tag     message tag
     * @param buffers source memory per range (host memory)
     * @param offsets first byte per range
     * @param lengths bytes per range
     * @param from    first range used
     * @param count   ranges used, at least 1
     * @param timeout deadline of the send
     * @param done    called once when it ended
     * @return false when this connection cannot send these ranges vectored (nothing was sent)
     */
    boolean sendvAsync(int tag, MemoryBuffer[] buffers, long[] offsets, long[] lengths, int from, int count,
                       Duration timeout, SendCompletion done);

    /**
     * Posts the receive of the tag's next message, scattered into {@code count} ranges in order; its length must be
     * their total.
     *
     * @param tag     message tag
     * @param buffers destination memory per range (host memory)
     * @param offsets first byte per range
     * @param lengths bytes per range
     * @param from    first range used
     * @param count   ranges used, at least 1
     * @param timeout deadline of the receive
     * @param done    called once when it ended
     * @return false when this connection cannot receive into these ranges vectored (nothing was posted)
     */
    boolean recvvAsync(int tag, MemoryBuffer[] buffers, long[] offsets, long[] lengths, int from, int count,
                       Duration timeout, RecvCompletion done);
}
