package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Locks per tag, created on demand and dropped when unused (data tags are per transfer, so a fixed map would
 * grow forever). Only chunked receives (messages of at least {@code mpi.maxMessageBytes}) take them: their
 * chunks must not be shared with another receive of the same tag.
 */
final class TagLocks {
    /** A lock and how many callers hold or wait for it. */
    static final class Entry {
        final ReentrantLock lock = new ReentrantLock();
        int users;
    }

    private static final long SLICE_NANOS = TimeUnit.MILLISECONDS.toNanos(5);
    private final ConcurrentHashMap<Integer, Entry> locks = new ConcurrentHashMap<>();

    Entry acquire(int tag, long deadline, MpiConnectionManager manager, String op) {
        Entry entry = locks.compute(tag, (k, v) -> {
            Entry e = v == null ? new Entry() : v;
            e.users++;
            return e;
        });
        boolean locked = false;
        try {
            while (!locked) {
                if (manager.closed()) {
                    throw new TransportClosedException(op + " on tag " + tag + ": " + manager + " closed");
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new TransportException(ErrorCode.TIMEOUT, op + " on tag " + tag
                            + " timed out waiting for another chunked receive of the same tag");
                }
                // Short slices so close() is noticed without a second wake-up mechanism.
                locked = entry.lock.tryLock(Math.min(left, SLICE_NANOS), TimeUnit.NANOSECONDS);
            }
            return entry;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.CANCELLED, op + " on tag " + tag + " interrupted", e);
        } finally {
            if (!locked) {
                drop(tag);
            }
        }
    }

    void release(int tag, Entry entry) {
        entry.lock.unlock();
        drop(tag);
    }

    private void drop(int tag) {
        locks.computeIfPresent(tag, (k, v) -> --v.users == 0 ? null : v);
    }
}
