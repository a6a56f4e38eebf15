package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.PartPlan;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.function.IntFunction;

/**
 * A staged receive whose scatter runs on a helper thread, so the receiving thread posts its next receive right
 * after the previous one completes instead of after scattering it: a transport that places a message straight
 * into a posted receive (one copy) then finds one posted more often than when the receiver scatters in between
 * (an eager transport otherwise buffers the message: a second copy, and for large messages fresh pages).
 *
 * <p>The receiving thread iterates the part's messages and counts them; the helper iterates the same messages with
 * its own cursor and scatters each once it has arrived (each message has its own place in the staging buffer, so
 * the two never touch the same bytes). One helper task per peer and part, no object per message. Helpers come
 * from a shared pool of daemon threads ({@code kvt-standard-scatter-N}) that end after 100 ms idle.
 */
final class ScatterPipeline implements Runnable {
    private static final AtomicInteger THREADS = new AtomicInteger();
    /**
     * Idle helpers end after 100 ms: a busy rank keeps reusing them, an idle one holds no thread (leak checks that
     * wait for the threads of a finished transfer to end wait that long).
     */
    private static final ThreadPoolExecutor HELPERS = new ThreadPoolExecutor(0, Integer.MAX_VALUE, 100,
            TimeUnit.MILLISECONDS, new SynchronousQueue<>(), r -> {
                Thread t = new Thread(r, "kvt-standard-scatter-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
            });

    private final PartPlan plan;
    private final BufferManager bm;
    private final IntFunction<MemoryBuffer> regions;
    private final MemoryBuffer staging;
    private final Thread receiver;
    private volatile int arrived;
    private volatile boolean abandoned;
    private volatile boolean finished;
    private volatile Throwable failure;
    private volatile Thread helper;

    private ScatterPipeline(PartPlan plan, BufferManager bm, IntFunction<MemoryBuffer> regions,
                            MemoryBuffer staging) {
        this.plan = plan;
        this.bm = bm;
        this.regions = regions;
        this.staging = staging;
        this.receiver = Thread.currentThread();
    }

    /**
     * Receives a staged part from a peer into {@code staging}, scattering on a helper thread.
     *
     * @param session the transfer
     * @param peer    peer position
     * @param plan    the part's plan (this rank stages: its plan does, or its pool's memory cannot reach the
     *                transport and each direct message is bounced through {@code staging})
     * @param bm      copies
     * @param regions this rank's regions
     * @param staging the part's staging buffer
     */
    static void receive(TransferSession session, int peer, PartPlan plan, BufferManager bm,
                        IntFunction<MemoryBuffer> regions, MemoryBuffer staging) {
        ScatterPipeline p = new ScatterPipeline(plan, bm, regions, staging);
        HELPERS.execute(p);
        PartPlan.Cursor c = plan.cursor();
        try {
            int n = 0;
            while (c.next()) {
                if (p.failure != null) {
                    break; // the helper failed: stop receiving, report its failure below
                }
                session.recv(peer, staging, c.streamOffset(), c.length());
                p.arrived = ++n;
                Thread h = p.helper;
                if (h != null) {
                    LockSupport.unpark(h);
                }
            }
        } catch (RuntimeException | Error e) {
            p.abandoned = true;
            LockSupport.unpark(p.helper);
            p.awaitHelper();
            throw e;
        }
        p.awaitHelper();
        Throwable f = p.failure;
        if (f != null) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "scattering a part received from"
                    + " peer position " + peer + " failed: " + f, f);
        }
    }

    /** Waits (uninterruptibly, bounded by the helper's own bounded work) until the helper has finished. */
    private void awaitHelper() {
        while (!finished) {
            LockSupport.parkNanos(this, 1_000_000L);
        }
    }

    @Override
    public void run() {
        helper = Thread.currentThread();
        try {
            PartPlan.Cursor c = plan.cursor();
            int done = 0;
            while (c.next()) {
                while (arrived <= done) {
                    if (abandoned) {
                        return;
                    }
                    LockSupport.parkNanos(this, 200_000L);
                }
                c.copy(bm, regions, staging, c.streamOffset(), true);
                done++;
            }
            // This thread's copies must be complete before the blocks are handed over.
            bm.synchronize();
        } catch (RuntimeException | Error e) {
            failure = e;
        } finally {
            helper = null;
            finished = true;
            LockSupport.unpark(receiver);
        }
    }
}
