package dev.kvtransfer.core.transfer;

import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * A layer-wise move on the context side that holds no thread while it waits for the engine's next layer.
 *
 * <p>Before, a sender thread ran a layer-wise request's move from its first layer to its last and waited in
 * between for the engine to mark each layer ready, so with {@code sendConcurrency} threads (2 by default) only that
 * many layer-wise requests moved during their prefill; the others started after it and exposed their whole move.
 * Now a run moves every layer that is ready, in order, then leaves a listener on the request
 * ({@link TransferHandle#whenLayersReady}) and a deadline, and gives its thread back; the engine's next mark (or the
 * deadline, or the request's end) queues the next run on the sender pool. Runs of one request never overlap (a wake
 * counter: a wake during a run makes that run look again instead of starting another), so its layers still go out
 * in order from one thread at a time.
 *
 * <p>Only for layer-wise pushes (one-sided writes, including a local pull that moves as writes): a pull's layer is a
 * two-sided send that waits for the generation side's receive, and that receive may wait for one of the generation
 * side's {@code recvSlots} staging slots. With every request's first layer moving at once, the sends of requests
 * without a slot took every sender thread and the requests holding the slots never got their next layer sent: four
 * layer-wise pulls over UCX on two slots timed out. A pull keeps its sender thread from its first layer to its last.
 *
 * <p>It ends once: moved (the done notices or checksums, then the request completes), failed (the layers did not
 * come by the session's deadline, the request ended, a move failed), or dropped by a shutdown.
 */
final class LayerPump implements Runnable {
    private final ContextSend send;
    private final ContextSend.Signalled s;
    private final Executor executor;
    private final Supplier<ScheduledExecutorService> timer;
    private final Consumer<LayerPump> ended;
    private final int count;
    private final AtomicInteger wakes = new AtomicInteger();
    private final AtomicBoolean over = new AtomicBoolean();
    /** The next local layer to move (-1: nothing moves); only the running run touches it. */
    private int next;
    private volatile ScheduledFuture<?> deadlineTask;

    /**
     * @param send       moves a layer and ends the request
     * @param s          the signalled request
     * @param executor   where later runs go (the sender pool)
     * @param timer      wakes a waiting pump at the session's deadline
     * @param ended      told once the pump ended, however
     */
    LayerPump(ContextSend send, ContextSend.Signalled s, Executor executor,
              Supplier<ScheduledExecutorService> timer, Consumer<LayerPump> ended) {
        this.send = send;
        this.s = s;
        this.executor = executor;
        this.timer = timer;
        this.ended = ended;
        this.count = send.layerCount();
    }

    /** Runs the first step on the calling (sender) thread. */
    void start() {
        wakes.set(1);
        run();
    }

    /** Queues a run unless one is queued or running (then that one looks again). */
    void wake() {
        if (wakes.getAndIncrement() != 0) {
            return;
        }
        try {
            executor.execute(this);
        } catch (RejectedExecutionException e) {
            drop("the transceiver closed while the request waited for its next layer");
        }
    }

    @Override
    public void run() {
        while (true) {
            int seen = wakes.get();
            step();
            if (wakes.addAndGet(-seen) == 0) {
                return;
            }
        }
    }

    private void step() {
        if (over.get()) {
            return;
        }
        TransferHandle h = s.d.local();
        try {
            if (next == 0 && send.nothingToMove(s.session)) {
                next = -1; // the generation side holds every block: no layer, no end notices (as a whole move)
            }
            while (next >= 0 && next < count) {
                if (h.layersReady() <= next) {
                    if (System.nanoTime() - s.session.deadlineNanos() >= 0) {
                        throw send.layersNotReady(h, next + 1);
                    }
                    if (!h.whenLayersReady(next + 1, this::wake)) {
                        if (deadlineTask == null) {
                            deadlineTask = timer.get().schedule(this::wake, Math.max(0, s.session.deadlineNanos()
                                    - System.nanoTime()), TimeUnit.NANOSECONDS);
                        }
                        return; // the thread goes back; the mark, the end or the deadline wakes this
                    }
                    if (h.layersReady() <= next) {
                        throw send.layersNotReady(h, next + 1); // the request ended
                    }
                }
                send.moveLayer(h, s.session, s.push, next);
                next++;
            }
            if (next >= 0) {
                send.endMove(s.session, s.push);
            }
        } catch (RuntimeException e) {
            if (end()) {
                send.failMove(s, e);
            }
            return;
        }
        if (end()) { // else dropped meanwhile
            send.conclude(s);
        }
    }

    /** Ends a pump that no run will finish (a shutdown): the request fails, its peers are told. */
    void drop(String why) {
        if (end()) {
            send.drop(s, why);
        }
    }

    private boolean end() {
        if (!over.compareAndSet(false, true)) {
            return false;
        }
        ScheduledFuture<?> t = deadlineTask;
        if (t != null) {
            t.cancel(false);
        }
        ended.accept(this);
        return true;
    }
}
