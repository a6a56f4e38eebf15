package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.transfer.ContextRequests.Dispatch;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Where a context rank's dispatched requests are served, and the threads that serve them, all bounded, named and
 * owned by the transceiver's lifecycle: the responder agent, the {@link CacheSender#INFO_READERS} info threads and
 * the {@code sendConcurrency} sender threads. The one dispatch policy: a request's ready signals go out on the
 * dispatching thread at once; its move runs inline on the info thread that completed it when that cannot delay
 * anything ({@link #serveInline}), else on a sender thread ({@link #submit}), a pull above the inline size only
 * once its requesters said go ({@link PullGo}).
 *
 * <p>Started once, under the owner's lock; the rest is thread-safe.
 */
final class ContextDispatch {
    private final TransferEnv env;
    private final ContextSend send;
    private final AtomicInteger senderThreads = new AtomicInteger();
    /** Requests being sent right now, on sender threads or inline (at most sendConcurrency inline). */
    private final AtomicInteger busySenders = new AtomicInteger();
    /** Info threads serving a request inline right now (0 or 1, {@link #serveInline}). */
    private final AtomicInteger inlineReaders = new AtomicInteger();
    private volatile AgentRunner responder;
    private volatile ThreadPoolExecutor senders;
    private volatile ThreadPoolExecutor infoThreads;
    /** Layer-wise moves waiting for the engine's next layer, holding no thread ({@link LayerPump}). */
    private final java.util.Set<LayerPump> pumps = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** Pulls waiting for their requesters' go, holding no thread ({@link PullGo}). */
    private final java.util.Set<PullGo> goWaits = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** Wakes a waiting layer-wise move at its deadline; its one thread starts with the first such wait. */
    private java.util.concurrent.ScheduledThreadPoolExecutor deadlines;
    private boolean shutDown;

    ContextDispatch(TransferEnv env, ContextSend send) {
        this.env = env;
        this.send = send;
    }

    /** @return whether {@link #start} ran */
    boolean started() {
        return responder != null;
    }

    /**
     * Starts the threads (the owner calls it once, under its lock): the responder is an Agrona agent whose duty
     * cycle never blocks (a zero-wait poll, posted info receives); its idle strategy does the waiting, in the
     * transport's own wait for the next header ({@code InfoIntake.ResponderIdle}). Its errors go to the metrics'
     * error path and counter. The info threads' idle worker spins before it parks while {@code lightLoad} holds
     * ({@link SpinThenParkQueue}).
     */
    void start(InfoIntake intake, java.util.function.BooleanSupplier lightLoad) {
        int n = env.config().sendConcurrency();
        senders = new ThreadPoolExecutor(n, n, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(), r -> {
            Thread t = new Thread(r, env.threadPrefix() + "-send-" + senderThreads.getAndIncrement());
            t.setDaemon(true);
            return t;
        });
        AtomicInteger readers = new AtomicInteger();
        // Threads start on the first task.
        infoThreads = new ThreadPoolExecutor(CacheSender.INFO_READERS, CacheSender.INFO_READERS, 0,
                TimeUnit.MILLISECONDS, new SpinThenParkQueue(SpinThenParkQueue.spinNanos(env), lightLoad),
                r -> {
            Thread t = new Thread(r, env.threadPrefix() + "-info-" + readers.getAndIncrement());
            t.setDaemon(true);
            return t;
        });
        Agent agent = intake.responder(infoThreads);
        AgentRunner runner = new AgentRunner(intake.idleStrategy(), e -> {
            if (e instanceof AgentTerminationException) {
                return; // the agent's own, orderly stop (close, or the transport closed)
            }
            env.metrics().error(e instanceof KvTransferException ? e : new KvTransferException(ErrorCode.INTERNAL,
                    KvTransferException.NO_REQUEST, "responder of rank " + env.selfIndex() + ": " + e, e));
        }, null, agent);
        AgentRunner.startOnThread(runner, r -> {
            Thread t = new Thread(r, env.threadPrefix() + "-responder");
            t.setDaemon(true);
            return t;
        });
        responder = runner;
    }

    /** @return whether nothing is being sent or waits for a sender thread (the responder may then read infos) */
    boolean idle() {
        ThreadPoolExecutor s = senders;
        return busySenders.get() == 0 && inlineReaders.get() == 0 && (s == null || s.getQueue().isEmpty());
    }

    /**
     * Serves a dispatched request on this info thread instead of handing it to a sender thread (one hand-off and one
     * wake-up fewer on a small request's path) when that cannot delay anything: the request is small
     * ({@link CacheSender#INLINE_SEND_BYTES} of this rank's blocks at most) and not layer by layer (which would wait
     * here for the engine), no further info of this connection is queued behind it, no dispatched request waits for
     * a sender thread, no other info thread is serving one inline (so one of them always reads), and fewer than
     * {@code sendConcurrency} requests are being sent (this one then counts as one of them). On the responder only
     * eager sends, which never wait for the peer.
     *
     * @return true when it was served here
     */
    boolean serveInline(Dispatch<Connection, TransferHandle> d, InfoIntake.InfoQueue q, boolean onResponder,
                        boolean closing) {
        TransferHandle h = d.local();
        if (closing || h.layerWise() || !senders.getQueue().isEmpty()) {
            return false;
        }
        for (int i = 0; i < d.asked().size(); i++) {
            if (d.asked().get(i).info().pullGo()) {
                return false; // it waits for the requester's go (PullGo), with no thread
            }
        }
        // Every block of the prompt (this rank's share may be smaller): no copy of the block ids.
        long bytes = (long) BlockDistribution.blocksFor(h.promptLength(), env.selfCache().tokensPerBlock())
                * env.cache().layout().blockBytes();
        if (bytes > CacheSender.INLINE_SEND_BYTES || (onResponder && bytes > Connection.EAGER_LIMIT)) {
            return false;
        }
        synchronized (q) {
            if (!q.pending.isEmpty()) {
                return false;
            }
        }
        // One info thread at most serves inline: the other keeps reading every other connection's infos, so a
        // counterpart that stalls its receive cannot hold up other counterparts' requests.
        if (!inlineReaders.compareAndSet(0, 1)) {
            return false;
        }
        int limit = env.config().sendConcurrency();
        while (true) {
            int busy = busySenders.get();
            if (busy >= limit) {
                inlineReaders.set(0);
                return false;
            }
            if (busySenders.compareAndSet(busy, busy + 1)) {
                break;
            }
        }
        try {
            env.metrics().inlineSend();
            send.send(d);
        } finally {
            busySenders.decrementAndGet();
            inlineReaders.set(0);
        }
        return true;
    }

    /**
     * Serves a dispatched request: its ready signals go out on this thread at once (they never wait behind
     * another request's move, see {@link ContextSend#signal}), and its move, when this rank has one, on a sender
     * thread.
     */
    void submit(Dispatch<Connection, TransferHandle> d) {
        ContextSend.Signalled s = send.signal(d);
        if (s == null) {
            return;
        }
        if (s.go != null) {
            // A pull whose requesters say go when their receive started: wait for it with no thread (PullGo), or
            // on the sender thread where the transport does not post receives.
            if (PullGo.post(send, s, send.control(), this::afterGo, goWaits)) {
                return;
            }
            queue(new MoveTask(s, true, null));
            return;
        }
        if (!s.moves) {
            send.finish(s); // nothing to move: the request completes here
            return;
        }
        queue(new MoveTask(s, false, null));
    }

    /** Every go of a pull came (a transport thread), or one failed: its move, or its failure, goes to a sender. */
    private void afterGo(ContextSend.Signalled s, KvTransferException failure) {
        queue(new MoveTask(s, false, failure));
    }

    private void queue(MoveTask t) {
        try {
            senders.execute(t);
        } catch (RejectedExecutionException e) {
            t.dropped("the transceiver is closing");
        }
    }

    /**
     * A signalled request waiting for a sender thread to move it (or to fail, after its go failed); recognisable when
     * a shutdown drops it.
     */
    private final class MoveTask implements Runnable {
        final ContextSend.Signalled s;
        /** Wait for the requesters' go on the sender thread first (a transport that does not post receives). */
        final boolean awaitGo;
        /** Why the request fails instead (its go did not come), or null. */
        final KvTransferException failure;

        MoveTask(ContextSend.Signalled s, boolean awaitGo, KvTransferException failure) {
            this.s = s;
            this.awaitGo = awaitGo;
            this.failure = failure;
        }

        /** Ends the request that no sender thread will run. */
        void dropped(String why) {
            if (failure != null) {
                send.failMove(s, failure);
            } else {
                send.drop(s, why);
            }
        }

        @Override
        public void run() {
            busy(() -> {
                if (failure != null) {
                    send.failMove(s, failure);
                    return;
                }
                if (awaitGo) {
                    try {
                        PullGo.awaitBlocking(s, send.control());
                    } catch (RuntimeException e) {
                        send.failMove(s, e);
                        return;
                    }
                }
                if (!s.moves) {
                    send.finish(s);
                } else if (s.layered && s.push) {
                    // A layer-wise push gives this thread back while it waits for a layer; a pull keeps it
                    // (LayerPump says why).
                    LayerPump p = new LayerPump(send, s, pump -> senders.execute(() -> busy(pump)),
                            ContextDispatch.this::deadlines, pumps::remove);
                    pumps.add(p);
                    p.start();
                } else {
                    send.finish(s);
                }
            });
        }
    }

    /** Runs a move's work on a sender thread, counted in {@link #busySenders} while it runs. */
    private void busy(Runnable work) {
        busySenders.incrementAndGet();
        try {
            work.run();
        } finally {
            busySenders.decrementAndGet();
        }
    }

    /** @return the deadline timer of waiting layer-wise moves, started on first use */
    private synchronized java.util.concurrent.ScheduledExecutorService deadlines() {
        if (shutDown) {
            throw new RejectedExecutionException("the transceiver is closing");
        }
        if (deadlines == null) {
            deadlines = new java.util.concurrent.ScheduledThreadPoolExecutor(1, r -> {
                Thread t = new Thread(r, env.threadPrefix() + "-layer-deadlines");
                t.setDaemon(true);
                return t;
            });
            deadlines.setRemoveOnCancelPolicy(true);
        }
        return deadlines;
    }

    /** Interrupts the threads; what no thread took yet ends here. Does not wait. */
    void shutdown() {
        ExecutorService it = infoThreads;
        if (it != null) {
            for (Runnable r : it.shutdownNow()) {
                if (r instanceof InfoIntake.PostedInfo p) {
                    p.drop(); // a received info no info thread took: its lease goes back
                }
            }
        }
        ExecutorService s = senders;
        if (s != null) {
            // Signalled requests no sender thread has taken yet end here (their counterparts were told ready: a push
            // peer gets an abort notice, a pull peer sees the transport close).
            for (Runnable r : s.shutdownNow()) {
                if (r instanceof MoveTask t) {
                    t.dropped("the transceiver closed before a sender thread took the request");
                }
            }
        }
        java.util.concurrent.ScheduledExecutorService timer;
        synchronized (this) {
            shutDown = true;
            timer = deadlines;
        }
        if (timer != null) {
            timer.shutdownNow();
        }
        // Layer-wise moves waiting for a layer (or queued to resume) end here, as untaken ones do; so do pulls
        // waiting for their requesters' go.
        for (LayerPump p : pumps) {
            p.drop("the transceiver closed while the request waited for its next layer");
        }
        for (PullGo g : goWaits) {
            g.drop("the transceiver closed while the request waited for its requester's go");
        }
    }

    /**
     * Waits for the responder, sender and info threads to end.
     *
     * @return true when every thread ended by the deadline ({@code System.nanoTime()})
     */
    boolean awaitTermination(long deadline) {
        AgentRunner r = responder;
        if (r == null) {
            return true;
        }
        try {
            Thread t = r.thread();
            if (t != null) {
                t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            }
            boolean ok = (t == null || !t.isAlive())
                    && senders.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)
                    && infoThreads.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (ok) {
                r.close();
            }
            return ok;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }
}
