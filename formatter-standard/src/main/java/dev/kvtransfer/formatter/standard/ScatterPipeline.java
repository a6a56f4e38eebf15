package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.formatter.support.PartPlan;

import java.util.concurrent.locks.LockSupport;
import java.util.function.IntFunction;

/**
 * A staged receive whose scatter runs on a helper thread, so the receiving thread posts its next receive right
 * after the previous one completes instead of after scattering it: a transport that places a message straight
 * into a posted receive (one copy) then finds one posted more often than when the receiver scatters in between
 * (an eager transport otherwise buffers the message: a second copy, and for large messages fresh pages).
 *
 * <p>The receiving thread iterates the part's messages and counts them; the helper iterates the same messages with
 * its own cursor and scatters each once it has arrived. Messages land either at their own place in the staging
 * buffer ({@code slots = 0}), or in a ring of {@code slots} places of the part's largest message at the start of
 * the staging buffer: the receive of message {@code n} then waits until the helper has scattered message
 * {@code n - slots}, and the staged bytes are still in the CPU's cache when the helper reads them (the ring is a few
 * MiB, the part's staging hundreds). Either way the two threads never touch the same bytes at once. One helper task
 * per peer and part, no object per message. Helpers come from the formatter's bounded pool ({@link ScatterHelpers});
 * when none is free the caller scatters itself.
 */
final class ScatterPipeline implements Runnable {
    private final PartPlan plan;
    private final BufferManager bm;
    private final IntFunction<MemoryBuffer> regions;
    private final MemoryBuffer staging;
    private final Thread receiver;
    /** Ring places, or 0: every message at its stream offset. */
    private final int slots;
    /** Bytes of one ring place (the part's largest message). */
    private final long slotBytes;
    private volatile int arrived;
    /** Messages the helper has scattered (their ring places are free again). */
    private volatile int scattered;
    /** Whether the receiving thread waits for a ring place (the helper then unparks it). */
    private volatile boolean receiverWaits;
    private volatile boolean abandoned;
    private volatile boolean finished;
    private volatile Throwable failure;
    private volatile Thread helper;

    private ScatterPipeline(PartPlan plan, BufferManager bm, IntFunction<MemoryBuffer> regions,
                            MemoryBuffer staging, int slots, long slotBytes) {
        this.slots = slots;
        this.slotBytes = slotBytes;
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
     * @param slots   ring places (each {@code slotBytes}, within {@code staging}), or 0 for the stream's own offsets;
     *                a ring needs copies that are complete when {@code copy} returns (host memory)
     * @param slotBytes bytes of a ring place: at least the part's largest message
     * @param helpers the formatter's helper pool
     * @return false, before receiving anything, when no helper was free (the caller receives and scatters itself)
     */
    static boolean receive(TransferSession session, int peer, PartPlan plan, BufferManager bm,
                           IntFunction<MemoryBuffer> regions, MemoryBuffer staging, int slots, long slotBytes,
                           ScatterHelpers helpers) {
        ScatterPipeline p = new ScatterPipeline(plan, bm, regions, staging, slots, slotBytes);
        if (!helpers.tryStart(p)) {
            return false;
        }
        PartPlan.Cursor c = plan.cursor();
        try {
            int n = 0;
            while (c.next()) {
                if (slots > 0 && !p.awaitSlot(n)) {
                    break; // the helper failed: stop receiving, report its failure below
                }
                if (p.failure != null) {
                    break; // the helper failed: stop receiving, report its failure below
                }
                session.recv(peer, staging, p.place(n, c), c.length());
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
        return true;
    }

    /** Where message {@code n} (at the cursor) is staged. */
    private long place(int n, PartPlan.Cursor c) {
        return slots > 0 ? (n % slots) * slotBytes : c.streamOffset();
    }

    /**
     * Waits until message {@code n}'s ring place is free: the helper has scattered message {@code n - slots}
     * (bounded by the helper's own bounded copies).
     *
     * @return false if the helper ended first (failed)
     */
    private boolean awaitSlot(int n) {
        int need = n - slots + 1;
        if (scattered >= need) {
            return true;
        }
        receiverWaits = true;
        try {
            while (scattered < need) {
                if (finished) {
                    return scattered >= need;
                }
                LockSupport.parkNanos(this, 1_000_000L);
            }
            return true;
        } finally {
            receiverWaits = false;
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
                c.copy(bm, regions, staging, place(done, c), true);
                scattered = ++done;
                if (receiverWaits) {
                    LockSupport.unpark(receiver);
                }
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
