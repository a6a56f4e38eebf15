package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.transport.support.EmulatedOneSided;

import java.time.Duration;
import java.util.Set;

/**
 * This manager's one-sided writes: one copy through shared memory between processes of one host where both sides
 * allow it ({@link ShmOwner}, {@link ShmWriter}; {@code aeron.sharedMemoryWrites}, a deployment secret, pools in
 * shared files), else emulated over the connection ({@link EmulatedOneSided}, two passes over IPC).
 */
final class OneSidedWrites implements AutoCloseable {
    private final EmulatedOneSided emulated;
    private final ShmOwner owner;
    private final ShmWriter writer;
    private final boolean shares;
    private final ThreadLocal<WriteBatch> rest = ThreadLocal.withInitial(WriteBatch::new);

    /** The writes of a manager, as its settings and authentication allow. */
    static OneSidedWrites of(AeronConnectionManager m, AeronSettings settings, boolean authenticated,
                             ErrorHandler errors, Duration opTimeout) {
        return new OneSidedWrites(m, new EmulatedOneSided(m, new ControlBuffers(), errors, opTimeout, m.name),
                settings.sharedMemoryWrites, authenticated, errors, opTimeout, m.name);
    }

    OneSidedWrites(ConnectionManager manager, EmulatedOneSided emulated, boolean enabled, boolean authenticated,
                   ErrorHandler errors, Duration opTimeout, String name) {
        this.emulated = emulated;
        this.owner = enabled ? new ShmOwner(manager, authenticated, errors, opTimeout, name) : null;
        this.writer = enabled ? new ShmWriter(name, manager::localAddress) : null;
        this.shares = enabled && authenticated;
    }

    RegisteredRegion register(MemoryBuffer memory) {
        RegisteredRegion r = emulated.register(memory);
        return owner == null ? r : owner.wrap(r, memory, null);
    }

    RegisteredRegion register(MemoryBuffer memory, Set<String> writers) {
        RegisteredRegion r = emulated.register(memory, writers);
        return owner == null ? r : owner.wrap(r, memory, writers);
    }

    /**
     * Writes a batch: the entries the owner shares through memory are copied here, the others go emulated.
     *
     * @return bytes copied through shared memory
     */
    long write(Connection c, WriteBatch batch, Duration timeout) {
        if (writer == null) {
            emulated.write(c, batch, timeout);
            return 0;
        }
        return write(c, batch, timeout, null);
    }

    /**
     * As {@link #write(Connection, WriteBatch, Duration)}, summing each entry's source into {@code crc32c}: in the
     * copy's pass for what goes through shared memory ({@link ShmWriter}).
     *
     * @return bytes copied through shared memory, or -1 when it cannot sum this batch (the path is off: the
     *         emulation would send the bytes after a pass of their own anyway; a source in device memory) and
     *         wrote nothing
     */
    long writeSummed(Connection c, WriteBatch batch, Duration timeout, int[] crc32c) {
        if (crc32c.length < batch.size()) {
            throw new IllegalArgumentException("crc32c has " + crc32c.length + " slots for " + batch.size()
                    + " entries");
        }
        if (writer == null) {
            return -1;
        }
        for (int i = 0; i < batch.size(); i++) {
            if (batch.source(i).kind() == dev.kvtransfer.api.memory.MemoryKind.DEVICE) {
                return -1;
            }
        }
        return write(c, batch, timeout, crc32c);
    }

    private long write(Connection c, WriteBatch batch, Duration timeout, int[] crc32c) {
        long deadline = System.nanoTime() + Math.max(0, timeout.toNanos());
        WriteBatch others = rest.get();
        others.clear();
        try {
            long shared = writer.write(c, batch, deadline, others, crc32c);
            if (others.size() > 0) {
                emulated.write(c, others, Duration.ofNanos(Math.max(1, deadline - System.nanoTime())));
            }
            return shared;
        } finally {
            others.clear();
        }
    }

    /** @return whether this manager hands its shared grants to writers (on, and every peer authenticated) */
    boolean sharesMemory() {
        return shares;
    }

    /** @return regions whose memory writers of this host reach directly */
    int sharedRegions() {
        return owner == null ? 0 : owner.sharedRegions();
    }

    /** @return the writer side, or null when the path is off (tests look at its mappings) */
    ShmWriter writer() {
        return writer;
    }

    /** @return the emulation (tests look at its refusals) */
    EmulatedOneSided emulated() {
        return emulated;
    }

    @Override
    public void close() {
        if (owner != null) {
            owner.close();
        }
        emulated.close();
        if (writer != null) {
            writer.close();
        }
    }
}
