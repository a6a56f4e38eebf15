package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.WriteBatch;

import java.time.Duration;
import java.util.concurrent.atomic.LongAdder;

/**
 * A connection that counts the messages (transport send / recv calls, one-sided write entries) and bytes through
 * it, and logs what it wrote into the peer's pool (for the harness's coverage check) when given a log.
 */
final class CountingConnection implements Connection {
    private final Connection inner;
    private final LongAdder messages;
    private final LongAdder bytes;
    private final WriteLog log;
    private final int writerRank;

    CountingConnection(Connection inner, LongAdder messages, LongAdder bytes) {
        this(inner, messages, bytes, null, -1);
    }

    /**
     * @param log        where the entries written through this connection are recorded (null: not recorded)
     * @param writerRank the writing (context) rank, for the log
     */
    CountingConnection(Connection inner, LongAdder messages, LongAdder bytes, WriteLog log, int writerRank) {
        this.inner = inner;
        this.messages = messages;
        this.bytes = bytes;
        this.log = log;
        this.writerRank = writerRank;
    }

    @Override
    public Duration defaultTimeout() {
        return inner.defaultTimeout();
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        inner.send(tag, buffer, offset, length, timeout);
        count(length);
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        inner.recv(tag, buffer, offset, length, timeout);
        count(length);
    }

    @Override
    public boolean writeSummed(WriteBatch batch, Duration timeout, int[] crc32c) {
        if (!inner.writeSummed(batch, timeout, crc32c)) {
            return false;
        }
        counted(batch);
        return true;
    }

    @Override
    public void write(WriteBatch batch, Duration timeout) {
        inner.write(batch, timeout);
        counted(batch);
    }

    private void counted(WriteBatch batch) {
        messages.add(batch.size());
        bytes.add(batch.totalBytes());
        if (log != null) {
            log.record(writerRank, batch);
        }
    }

    private void count(long length) {
        messages.increment();
        bytes.add(length);
    }

    @Override
    public String peer() {
        return inner.peer();
    }

    @Override
    public int copiesPerByte(long length) {
        return inner.copiesPerByte(length);
    }

    @Override
    public int writeCopiesPerByte(long length) {
        return inner.writeCopiesPerByte(length);
    }

    @Override
    public String toString() {
        return "Counting" + inner;
    }
}
