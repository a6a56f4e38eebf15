package dev.kvtransfer.formatter.standard;

import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The scatter helpers of one {@link StandardCacheFormatter} ({@link ScatterPipeline}): at most {@code maxThreads}
 * daemon threads named {@code kvt-standard-scatter-<formatter>-<n>}, made on demand and ended after 100 ms idle, so
 * a busy rank keeps reusing them and an idle one holds none. No queue: a staged receive that finds every helper
 * busy scatters on its own thread instead ({@link #tryStart} returns false), which moves the same bytes with less
 * overlap, so the bound never makes a transfer wait or fail. Owned by the formatter: {@link #close()} (from
 * {@link StandardCacheFormatter#close()}) lets running scatters finish and takes no more.
 */
final class ScatterHelpers implements AutoCloseable {
    /** Idle helpers end after this long (leak checks that wait for a finished transfer's threads wait as long). */
    static final long KEEP_ALIVE_MILLIS = 100;
    /** Numbers the formatters' pools in thread names only. */
    private static final AtomicInteger POOLS = new AtomicInteger();

    private final ThreadPoolExecutor pool;
    private final String prefix;

    /** @param maxThreads most helpers at once (at least 1) */
    ScatterHelpers(int maxThreads) {
        if (maxThreads < 1) {
            throw new IllegalArgumentException("helper threads = " + maxThreads + ": must be at least 1");
        }
        this.prefix = "kvt-standard-scatter-" + POOLS.incrementAndGet() + "-";
        AtomicInteger threads = new AtomicInteger();
        this.pool = new ThreadPoolExecutor(0, maxThreads, KEEP_ALIVE_MILLIS, TimeUnit.MILLISECONDS,
                new SynchronousQueue<>(), r -> {
                    Thread t = new Thread(r, prefix + threads.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
    }

    /** Helpers for a formatter on this machine: one per core, at least two. */
    static int defaultThreads() {
        return Math.max(2, Runtime.getRuntime().availableProcessors());
    }

    /**
     * Starts {@code task} on an idle or a new helper.
     *
     * @return false when every helper is busy or the pool is closed (the caller scatters itself)
     */
    boolean tryStart(Runnable task) {
        try {
            pool.execute(task);
            return true;
        } catch (RejectedExecutionException e) {
            return false;
        }
    }

    /** @return the most helpers that ever ran at once */
    int largestThreads() {
        return pool.getLargestPoolSize();
    }

    /** @return the name every helper thread of this pool starts with */
    String threadPrefix() {
        return prefix;
    }

    /** @return whether the pool is closed and every helper has ended */
    boolean isTerminated() {
        return pool.isTerminated();
    }

    /** Takes no more scatters; running ones finish (each is bounded by its receive), then the threads end. */
    @Override
    public void close() {
        pool.shutdown();
    }

    @Override
    public String toString() {
        return "ScatterHelpers{" + prefix + "*, at most " + pool.getMaximumPoolSize() + "}";
    }
}
