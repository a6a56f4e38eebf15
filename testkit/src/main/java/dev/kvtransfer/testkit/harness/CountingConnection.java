package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;

import java.time.Duration;
import java.util.concurrent.atomic.LongAdder;

/** A connection that counts the messages (transport send / recv calls) and bytes through it. */
final class CountingConnection implements Connection {
    private final Connection inner;
    private final LongAdder messages;
    private final LongAdder bytes;

    CountingConnection(Connection inner, LongAdder messages, LongAdder bytes) {
        this.inner = inner;
        this.messages = messages;
        this.bytes = bytes;
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

    private void count(long length) {
        messages.increment();
        bytes.add(length);
    }

    @Override
    public String peer() {
        return inner.peer();
    }

    @Override
    public String toString() {
        return "Counting" + inner;
    }
}
