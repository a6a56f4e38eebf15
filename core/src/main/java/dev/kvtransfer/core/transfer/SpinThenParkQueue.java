package dev.kvtransfer.core.transfer;

import java.util.AbstractQueue;
import java.util.Collection;
import java.util.Iterator;
import java.util.Objects;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;

/**
 * The work queue of a request pool whose hand-offs are on a request's critical path: one idle worker at a time
 * spins (yielding) for {@code spinNanos} before it parks, so a task handed over soon after the last one ended
 * reaches a running thread instead of waking a parked one. The others park at once: a pool of n costs at most one
 * spinning thread, and only for {@code spinNanos} after it ran out of work. This is the pool's counterpart of the
 * transports' spin-then-park agents ({@code aeron.spinMicros}): a request/response exchange finds the thread
 * of its next step awake. A wake-up of a parked thread cost 14–23 µs per hop on the 2-vCPU reference host
 * (docs/benchmarks.md, "Hand-offs to request pools").
 *
 * <p>An offer wakes a parked worker only when no worker spins or more than one task waits, so a spinning worker's
 * task costs no wake-up at all. The lost-wake-up races with an offer that saw a worker spinning are closed in the
 * usual order (the offer adds its task, then reads the flag; the spinner clears its flag, then looks at the queue):
 * a spinner that gives up looks once more before it parks, and one that took a task wakes a parked worker when
 * more are queued.
 *
 * <p>Unbounded, like the {@code LinkedBlockingQueue} it replaces: the pools bound their work elsewhere (pending
 * requests, in-flight limits).
 */
final class SpinThenParkQueue extends AbstractQueue<Runnable> implements BlockingQueue<Runnable> {
    /** Most requests in flight on a side for which its pools' idle workers still spin. */
    static final int LIGHT_LOAD = 2;

    private final ConcurrentLinkedQueue<Runnable> items = new ConcurrentLinkedQueue<>();
    private final AtomicInteger count = new AtomicInteger();
    /** 1 while a worker spins for the next task; at most one does. */
    private final AtomicInteger spinning = new AtomicInteger();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition notEmpty = lock.newCondition();
    /**
     * Workers parked on {@link #notEmpty}: changed under {@link #lock}, read without it by an offer, which then takes
     * the lock only when someone waits. A worker raises it before its last look at the queue, an offer adds its task
     * before it reads it: one of the two sees the other.
     */
    private volatile int waiters;
    private final long spinNanos;
    private final BooleanSupplier lightLoad;

    /**
     * @param spinNanos how long one idle worker spins before it parks; 0 = never spins (a plain blocking queue)
     * @param lightLoad whether the side is lightly loaded now (at most {@link #LIGHT_LOAD} requests in flight): a
     *                  worker spins only then. Under load the cores are better spent on the work itself, and
     *                  tasks keep the workers busy anyway: spinning cost 64 requests in flight a third of their
     *                  requests/s between two processes on 2 vCPUs.
     */
    SpinThenParkQueue(long spinNanos, BooleanSupplier lightLoad) {
        if (spinNanos < 0) {
            throw new IllegalArgumentException("spinNanos = " + spinNanos + ": must be >= 0");
        }
        this.spinNanos = spinNanos;
        this.lightLoad = Objects.requireNonNull(lightLoad, "lightLoad");
    }

    /**
     * @return how long a pool's idle worker spins: {@code kvtransfer.poolSpinMicros}, or the transport's choice when
     *         it is not set
     */
    static long spinNanos(TransferEnv env) {
        int micros = env.config().poolSpinMicros();
        if (micros == dev.kvtransfer.core.TransceiverConfig.POOL_SPIN_TRANSPORT) {
            micros = Math.max(0, Math.min(100_000, env.connections().preferredPoolSpinMicros()));
        }
        return TimeUnit.MICROSECONDS.toNanos(micros);
    }

    @Override
    public boolean offer(Runnable r) {
        Objects.requireNonNull(r, "r");
        items.offer(r);
        int c = count.incrementAndGet();
        if (spinning.get() == 0 || c > 1) {
            signalIfWaiting();
        }
        return true;
    }

    private void signalIfWaiting() {
        if (waiters == 0) {
            return; // under load the workers are busy: an offer then takes no lock at all
        }
        lock.lock();
        try {
            if (waiters > 0) {
                notEmpty.signal();
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public Runnable poll() {
        Runnable r = items.poll();
        if (r != null) {
            count.decrementAndGet();
        }
        return r;
    }

    @Override
    public Runnable take() throws InterruptedException {
        Runnable r = poll(Long.MAX_VALUE, TimeUnit.NANOSECONDS);
        if (r == null) {
            throw new IllegalStateException("an unbounded wait ended with no task");
        }
        return r;
    }

    @Override
    public Runnable poll(long timeout, TimeUnit unit) throws InterruptedException {
        Runnable r = poll();
        if (r != null) {
            return r;
        }
        long total = unit.toNanos(timeout);
        long start = System.nanoTime();
        if (spinNanos > 0 && lightLoad.getAsBoolean() && spinning.compareAndSet(0, 1)) {
            r = spin(start, Math.min(spinNanos, total));
            if (r != null) {
                // An offer that came while this one still spun did not signal: another worker takes it now.
                if (!items.isEmpty()) {
                    signalIfWaiting();
                }
                return r;
            }
        }
        return park(start, total);
    }

    /** The one spinner's wait: the flag is cleared before it returns, whatever it returns. */
    private Runnable spin(long start, long limitNanos) throws InterruptedException {
        try {
            int spins = 0;
            while (true) {
                Runnable r = poll();
                if (r != null) {
                    return r;
                }
                if (Thread.interrupted()) {
                    throw new InterruptedException();
                }
                if (System.nanoTime() - start >= limitNanos) {
                    return null;
                }
                if ((++spins & 7) == 0) {
                    Thread.yield();
                } else {
                    Thread.onSpinWait();
                }
            }
        } finally {
            spinning.set(0);
        }
    }

    private Runnable park(long start, long total) throws InterruptedException {
        lock.lockInterruptibly();
        try {
            waiters++;
            try {
                while (true) {
                    // After the spinning flag went to 0 (or was never ours): an offer either sees it 0 and signals
                    // under this lock, or added its task before this look.
                    Runnable r = poll();
                    if (r != null) {
                        return r;
                    }
                    long left = total == Long.MAX_VALUE ? Long.MAX_VALUE : total - (System.nanoTime() - start);
                    if (left <= 0) {
                        return null;
                    }
                    if (left == Long.MAX_VALUE) {
                        notEmpty.await();
                    } else {
                        notEmpty.awaitNanos(left);
                    }
                }
            } finally {
                waiters--;
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public Runnable peek() {
        return items.peek();
    }

    @Override
    public void put(Runnable r) {
        offer(r);
    }

    @Override
    public boolean offer(Runnable r, long timeout, TimeUnit unit) {
        return offer(r);
    }

    @Override
    public int remainingCapacity() {
        return Integer.MAX_VALUE;
    }

    @Override
    public boolean remove(Object o) {
        if (items.remove(o)) {
            count.decrementAndGet();
            return true;
        }
        return false;
    }

    @Override
    public int drainTo(Collection<? super Runnable> c) {
        return drainTo(c, Integer.MAX_VALUE);
    }

    @Override
    public int drainTo(Collection<? super Runnable> c, int maxElements) {
        Objects.requireNonNull(c, "c");
        if (c == this) {
            throw new IllegalArgumentException("drain into itself");
        }
        int n = 0;
        Runnable r;
        while (n < maxElements && (r = poll()) != null) {
            c.add(r);
            n++;
        }
        return n;
    }

    /** Weakly consistent, as {@link ConcurrentLinkedQueue}'s; removing through it keeps the count. */
    @Override
    public Iterator<Runnable> iterator() {
        Iterator<Runnable> it = items.iterator();
        return new Iterator<>() {
            private Runnable last;

            @Override
            public boolean hasNext() {
                return it.hasNext();
            }

            @Override
            public Runnable next() {
                last = it.next();
                return last;
            }

            @Override
            public void remove() {
                if (last == null) {
                    throw new IllegalStateException("next() first");
                }
                SpinThenParkQueue.this.remove(last);
                last = null;
            }
        };
    }

    @Override
    public int size() {
        return Math.max(0, count.get());
    }

    @Override
    public boolean isEmpty() {
        return items.isEmpty();
    }
}
