package dev.kvtransfer.ucx;

import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A manager's state (running → closing → closed) and the lock that keeps {@code ucp_worker_signal} off a
 * destroyed worker: signalling holds the read lock and checks {@link #running()}; leaving RUNNING and
 * destroying the worker hold the write lock.
 */
final class UcxLifecycle {
    static final int RUNNING = 0;
    static final int CLOSING = 1;
    static final int CLOSED = 2;

    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private volatile int state = RUNNING;

    boolean running() {
        return state == RUNNING;
    }

    int state() {
        return state;
    }

    ReentrantReadWriteLock.ReadLock readLock() {
        return lock.readLock();
    }

    ReentrantReadWriteLock.WriteLock writeLock() {
        return lock.writeLock();
    }

    /**
     * Leaves RUNNING (write lock held by the caller or taken here).
     *
     * @param whileLocked runs under the write lock if this call made the transition (e.g. a last signal)
     * @return whether this call made the transition
     */
    boolean beginClose(Runnable whileLocked) {
        lock.writeLock().lock();
        try {
            if (state != RUNNING) {
                return false;
            }
            state = CLOSING;
            whileLocked.run();
            return true;
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** Marks the worker destroyed; call with the write lock held. */
    void closed() {
        state = CLOSED;
    }
}
