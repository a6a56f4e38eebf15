package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.Aeron;
import io.aeron.Image;
import io.aeron.Subscription;
import io.aeron.exceptions.RegistrationException;
import org.agrona.collections.Long2ObjectHashMap;
import org.agrona.concurrent.ManyToOneConcurrentArrayQueue;

import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * The progress loop of one manager (Aeron's {@code Receiver}): run by an {@link AgentGroup} thread, it owns every
 * piece of the manager's mutable transfer state. Each duty cycle it takes the callers' operations off the command
 * queue (a {@link ManyToOneConcurrentArrayQueue}: callers never lock the agent's state), reads its inbound streams
 * ({@link Dispatcher}, {@link Matcher}), offers the control messages it owes (CTS, REJECT) and, every
 * {@value #TICK_MS} ms, checks liveness (peer loss), handshakes that never finished, lingering lost peers and the
 * Aeron client (a client closed by a stall is rebuilt and the manager re-subscribes on its own address).
 *
 * <p>Who runs the duty cycle: the group's thread, or a caller blocked on one of its ops ({@link #tryDutyCycle},
 * {@code aeron.callerPollMicros}): the waiting thread polls the streams and completes its own receive instead of
 * parking until the agent thread hands it over (one wake-up fewer per receive, and across processes no wait for
 * the agent thread's idle park). One thread at a time: every cycle runs under {@link #duty} (a try-lock — whoever
 * does not get it has nothing to do, the holder serves every stream and op of the manager, so no connection
 * starves), which also makes the state the cycle owns visible from one holder to the next.
 */
final class TransportAgent {
    private static final System.Logger LOG = System.getLogger(TransportAgent.class.getName());
    static final int FRAGMENT_LIMIT = 64;
    static final long TICK_MS = 10;
    private static final long TICK_NS = TimeUnit.MILLISECONDS.toNanos(TICK_MS);
    private static final long LIVENESS_NS = TimeUnit.MILLISECONDS.toNanos(100);
    private static final long LINGER_NS = TimeUnit.SECONDS.toNanos(60);
    private static final long RESUBSCRIBE_RETRY_NS = TimeUnit.MILLISECONDS.toNanos(250);
    private static final long RECOVERY_LIMIT_NS = TimeUnit.SECONDS.toNanos(120);

    final AeronConnectionManager m;
    final Matcher matcher;
    private final Dispatcher dispatcher;
    final ManyToOneConcurrentArrayQueue<Op> commands = new ManyToOneConcurrentArrayQueue<>(1 << 14);
    private final ConcurrentLinkedQueue<ImageEvent> imageEvents = new ConcurrentLinkedQueue<>();
    /** Our publications a peer's driver rejected: (registration id, its reason); bounded, see onPublicationRejected. */
    private final ManyToOneConcurrentArrayQueue<Rejection> rejections = new ManyToOneConcurrentArrayQueue<>(256);

    private final List<ImageState> images = new ArrayList<>();
    private final Long2ObjectHashMap<ImageState> imagesByKey = new Long2ObjectHashMap<>();
    private final List<ImageState> pending = new ArrayList<>();
    /** Streams awaiting their HELLO, oldest first (entries that left that state are dropped lazily). */
    private final java.util.ArrayDeque<ImageState> awaitingOrder = new java.util.ArrayDeque<>();
    /** Streams awaiting their HELLO per source ({@code ip:port}), and in all. */
    private final java.util.HashMap<String, int[]> awaitingBySource = new java.util.HashMap<>();
    private int awaitingCount;
    private final List<Peer> needsControl = new ArrayList<>();
    private final List<Peer> needsEstablish = new ArrayList<>();
    private final List<Peer> lingering = new ArrayList<>();
    private final AtomicBoolean removalStarted = new AtomicBoolean();
    private volatile boolean removed;
    private volatile boolean sweepDone;
    private int pollStart;
    private long nextTickNs;
    private long nextLivenessNs;
    private long lastLivenessNs;
    private int helloPeers;
    /** Held by whichever thread runs the duty cycle (the group's thread or a polling caller); see the class doc. */
    private final ReentrantLock duty = new ReentrantLock();
    /** Set by a caller that polled and stops: the group thread's next cycle counts as work (its spin restarts). */
    private volatile boolean handedBack;

    private final PostedDeadlines posted = new PostedDeadlines(); // deadlines of Connection.recvAsync
    private int generation;
    private boolean recovering;
    private long recoveryStartNs;
    private long udpRegistration = -1;
    private long ipcRegistration = -1;
    private long nextResubscribeNs;

    TransportAgent(AeronConnectionManager m, int generation) {
        this.m = m;
        this.matcher = new Matcher(m, this);
        this.dispatcher = new Dispatcher(m, this, matcher);
        this.generation = generation;
        long now = System.nanoTime();
        this.nextTickNs = now;
        this.nextLivenessNs = now;
        this.lastLivenessNs = now;
    }

    // ------------------------------------------------------------------------------------------ caller side

    /** Image handlers (client conductor thread): only queue the event. */
    void onAvailable(Image image, boolean ipc) {
        imageEvents.add(new ImageEvent(image, ipc, true));
    }

    void onUnavailable(Image image, boolean ipc) {
        imageEvents.add(new ImageEvent(image, ipc, false));
    }

    /** A peer's driver rejected a publication of this process (client conductor thread): only queue it. */
    void onPublicationRejected(long registrationId, String reason) {
        rejections.offer(new Rejection(registrationId, reason)); // full: one of many; the next frames retry
    }

    /**
     * An op names a peer whose publication is not open yet (a receive on a connection nobody sent on): open it, so
     * that the peer's liveness is watched (PEER_LOST on a connection that never exchanged a byte).
     */
    void ensureOpening(Peer p) {
        if (!p.lost && !p.connection.isEstablished() && !needsEstablish.contains(p)) {
            needsEstablish.add(p);
        }
    }

    boolean isRemoved() {
        return removed;
    }

    /** Whether {@link #onRemoved} began (its last drain of the command queue may have run). */
    boolean removalStarting() {
        return removalStarted.get();
    }

    boolean sweepDone() {
        return sweepDone;
    }

    void reportError(Throwable t) {
        m.reporter.report(t);
    }

    void onAgentError(Throwable t) {
        reportError(new TransportException(ErrorCode.INTERNAL, "aeron " + m.name + ": agent duty cycle failed: " + t,
                t));
    }

    // ------------------------------------------------------------------------------------------ duty cycle

    /** The group thread's cycle: nothing when a polling caller runs it right now (it serves everything). */
    int doWork() {
        if (!duty.tryLock()) {
            return 0;
        }
        try {
            int work = dutyCycle();
            if (handedBack) {
                handedBack = false;
                work++; // a caller stopped polling: spin again (aeron.spinMicros) before parking, as after a post
            }
            return work;
        } finally {
            duty.unlock();
        }
    }

    /** @return a blocked caller's cycle ({@code aeron.callerPollMicros}): the work done, or -1 when busy elsewhere */
    int tryDutyCycle() {
        if (!duty.tryLock()) {
            return -1;
        }
        try {
            return dutyCycle();
        } catch (Throwable t) {
            onAgentError(t);
            return 0;
        } finally {
            duty.unlock();
        }
    }

    /** A caller that polled stops and parks: the group thread takes over at once. */
    void handBack() {
        handedBack = true;
    }

    private int dutyCycle() {
        if (removed) {
            return 0;
        }
        int work = drainCommands();
        if (m.closing && !sweepDone) {
            sweep();
            work++;
        }
        work += checkClient();
        work += drainImageEvents();
        work += drainRejections();
        work += poll();
        work += flushControl();
        long now = System.nanoTime();
        work += posted.expireDue(now, matcher);
        if (now - nextTickNs >= 0) {
            nextTickNs = now + TICK_NS;
            work += tick(now);
        }
        return work;
    }

    /** Takes every queued op; also called when a CTS finds no waiting send (its wait may still be queued). */
    int drainCommands() {
        int n = 0;
        Op op;
        while ((op = commands.poll()) != null) {
            n++;
            if (op.cancelRequested) {
                matcher.cancel(op); // the second entry of an op whose caller gave up
                continue;
            }
            if (!op.casState(Op.QUEUED, Op.POSTED)) {
                continue; // cancelled by its caller before we took it: nothing refers to it
            }
            if (m.closing) {
                op.fail(m.closedError("the transport closed"));
                continue;
            }
            matcher.post(op);
            if (op.done != null && !op.isFinal()) {
                posted.track(op, matcher);
            }
        }
        return n;
    }

    private int poll() {
        int n = images.size();
        if (n == 0) {
            return 0;
        }
        int work = 0;
        int start = pollStart++ % n;
        for (int k = 0; k < n; k++) {
            ImageState img = images.get((start + k) % n);
            if (img.state == ImageState.BOUND || img.state == ImageState.AWAIT_HELLO) {
                work += img.image.controlledPoll(img.handler, FRAGMENT_LIMIT);
                if (images.size() != n) {
                    break; // the list changed under us (a refusal removed nothing, but keep it simple)
                }
            }
        }
        return work;
    }

    private static long key(boolean ipc, int sessionId) {
        return (ipc ? 1L << 32 : 0L) | (sessionId & 0xFFFF_FFFFL);
    }

    private int drainImageEvents() {
        int n = 0;
        ImageEvent e;
        while ((e = imageEvents.poll()) != null) {
            n++;
            long k = key(e.ipc, e.image.sessionId());
            if (e.available) {
                if (e.image.subscription() != m.subscription(e.ipc)) {
                    continue; // an image of a subscription we replaced (client rebuilt)
                }
                String source = String.valueOf(e.image.sourceIdentity());
                // IPC streams all come from "aeron:ipc": processes of our own uid (the driver directory is
                // owner-only), so only the total bound applies to them.
                int[] fromSource = e.ipc ? null : awaitingBySource.get(source);
                if (fromSource != null && fromSource[0] >= m.settings.maxPendingPerSource) {
                    rejectNew(e.image, "too many streams awaiting their HELLO from one source ("
                            + m.settings.maxPendingPerSource + "); rejected a new one from "
                            + ErrorReporter.peerText(source));
                    continue;
                }
                if (awaitingCount >= m.settings.maxPendingHandshakes) {
                    evictOldestAwaiting();
                }
                if (imagesByKey.size() >= m.settings.maxImages) {
                    rejectNew(e.image, m.settings.maxImages + " streams open already; rejected a new one from "
                            + ErrorReporter.peerText(source));
                    continue;
                }
                ImageState img = new ImageState(e.image, e.ipc, System.nanoTime(), dispatcher);
                ImageState old = imagesByKey.put(k, img);
                if (old != null) {
                    retire(old);
                }
                images.add(img);
                awaitingCount++;
                awaitingBySource.computeIfAbsent(source, x -> new int[1])[0]++;
                trimAwaitingOrder();
                awaitingOrder.addLast(img);
            } else {
                ImageState img = imagesByKey.get(k);
                if (img != null && img.image == e.image) {
                    imagesByKey.remove(k);
                    retire(img);
                }
            }
        }
        return n;
    }

    /** Peers that refused our stream are lost ({@link #refusalCode}); only our publications' rejections count. */
    private int drainRejections() {
        int n = 0;
        Rejection r;
        while ((r = rejections.poll()) != null) {
            n++;
            for (Peer p : m.peers.values()) {
                if (!p.lost && p.connection.registrationId() == r.registrationId()) {
                    String reason = ErrorReporter.peerText(r.reason());
                    p.lostCode = refusalCode(reason);
                    peerLost(p, "refused our stream: " + reason);
                }
            }
        }
        return n;
    }

    /** @return UNAUTHORIZED (wrong secret), PEER_LOST (it timed our session out: we resumed mid-stream), NETWORK */
    static ErrorCode refusalCode(String reason) {
        return reason.contains(REJECT_UNAUTHORIZED) ? ErrorCode.UNAUTHORIZED
                : reason.contains(MID_STREAM) ? ErrorCode.PEER_LOST : ErrorCode.NETWORK;
    }

    /** A stream that gets no state at all: rejected at once (its sender's driver is told), counted, reported. */
    private void rejectNew(Image image, String why) {
        m.counters.imagesRefused.increment();
        reportError(new TransportException(ErrorCode.NETWORK, "aeron " + m.name + ": " + why));
        reject(image, REJECT_MALFORMED + why);
    }

    /** Rejects the stream that has waited longest for its HELLO: the bound on such streams is reached. */
    private void evictOldestAwaiting() {
        ImageState oldest;
        while ((oldest = awaitingOrder.pollFirst()) != null) {
            if (oldest.awaiting && oldest.state == ImageState.AWAIT_HELLO) {
                refuse(oldest, "evicted before its HELLO: " + m.settings.maxPendingHandshakes + " streams were"
                        + " awaiting theirs (a flood of streams that never greet?)", false);
                return;
            }
        }
    }

    private void trimAwaitingOrder() {
        while (!awaitingOrder.isEmpty() && !awaitingOrder.peekFirst().awaiting) {
            awaitingOrder.pollFirst();
        }
    }

    /** The stream leaves the HELLO wait (bound, held, refused or gone): its place in the bounds is free again. */
    private void leaveAwait(ImageState img) {
        if (!img.awaiting) {
            return;
        }
        img.awaiting = false;
        awaitingCount--;
        String source = String.valueOf(img.image.sourceIdentity());
        int[] c = awaitingBySource.get(source);
        if (c != null && --c[0] <= 0) {
            awaitingBySource.remove(source);
        }
    }

    /** A stream went away (or was replaced): its peer is lost when it was that peer's stream. */
    private void retire(ImageState img) {
        leaveAwait(img);
        images.remove(img);
        pending.remove(img);
        Peer p = img.peer;
        if (img.state == ImageState.BOUND && p != null && p.image == img) {
            matcher.abandonAssembly(img, p);
            peerLost(p, img.image.isEndOfStream() ? CLOSED : "its stream ended (it closed, or was silent for "
                    + TimeUnit.NANOSECONDS.toMillis(m.settings.peerTimeoutNs) + " ms)");
        }
        img.state = ImageState.REFUSED;
        img.peer = null;
    }

    // ------------------------------------------------------------------------------------------ handshake

    /** A stream said a valid HELLO: bind it to its peer (Dispatcher). */
    void bind(ImageState img, String claimed, long incarnation, boolean authenticated) {
        leaveAwait(img);
        Address a;
        try {
            a = Address.parse(claimed);
        } catch (IllegalArgumentException e) {
            refuse(img, "its HELLO claims a malformed address: " + e.getMessage(), authenticated);
            return;
        }
        Peer existing = m.peers.get(a.hostPort());
        if (existing != null && existing.lost) {
            existing = null;
        }
        if (existing != null && existing.image != null) {
            // Never join or replace a live peer's session on a claim, authenticated or not: hold the stream until
            // the current one ends (the proof that the first peer is gone: its stream closed or went silent for the
            // peer timeout; a restarted peer then gets in) or the pending time runs out (anyone else). With one
            // secret for all, an insider's valid HELLO claiming the context's address used to cut the genuine
            // session off.
            img.state = ImageState.PENDING;
            img.pendingAddress = claimed;
            img.pendingIncarnation = incarnation;
            img.pendingAuthenticated = authenticated;
            pending.add(img);
            return;
        }
        if (existing == null) {
            if (helloPeers >= m.settings.maxImages) {
                refuse(img, helloPeers + " peers already", false);
                return;
            }
            existing = m.peerFor(a);
            if (existing.lost) {
                refuse(img, "its peer entry was lost meanwhile", false);
                return;
            }
        }
        helloPeers++;
        existing.image = img;
        existing.incarnation = incarnation;
        img.peer = existing;
        img.state = ImageState.BOUND;
        matcher.know(existing);
        // Our stream back to it opens on first use (a reply, or a receive posted on it), never on a HELLO alone:
        // a claim must not make us send to whatever address it names.
    }

    /** Refuses a stream: never read again (Dispatcher, handshake timeouts). */
    void refuse(ImageState img, String why, boolean unauthorized) {
        leaveAwait(img);
        img.state = ImageState.REFUSED;
        pending.remove(img);
        // Never read again and rejected below: its state goes now, not when the driver drops the image.
        images.remove(img);
        long k = key(img.ipc, img.image.sessionId());
        if (imagesByKey.get(k) == img) {
            imagesByKey.remove(k);
        }
        m.counters.imagesRefused.increment();
        if (unauthorized) {
            m.counters.unauthorized.increment();
        }
        reportError(new TransportException(unauthorized ? ErrorCode.UNAUTHORIZED : ErrorCode.MALFORMED, "aeron "
                + m.name + ": refused the stream " + img.describe() + ": " + why));
        // Tell the sender (its driver gets an error frame, its manager fails the calls waiting on us at once): a
        // peer with a wrong secret sees UNAUTHORIZED, not a TIMEOUT. The frame goes to where the stream came from,
        // never to the address a HELLO claims.
        reject(img.image, (unauthorized ? REJECT_UNAUTHORIZED : REJECT_MALFORMED) + why);
    }

    /**
     * Asks the driver to drop an image and tell its sender. Not for an image that is gone already: the driver would
     * answer each such request with an error of its own (a flood of short-lived forged streams made thousands).
     */
    private static void reject(Image image, String text) {
        if (image.isClosed()) {
            return; // gone already
        }
        try {
            image.reject(text.length() > MAX_REJECT_TEXT ? text.substring(0, MAX_REJECT_TEXT) : text);
        } catch (RuntimeException e) {
            // the image closed meanwhile, or the client is going away: nothing to tell
        }
    }

    static final String REJECT_UNAUTHORIZED = "kvtransfer UNAUTHORIZED: ";
    static final String REJECT_MALFORMED = "kvtransfer refused: ";
    static final String MID_STREAM = "it joined mid-stream";
    static final String CLOSED = "it closed its stream";
    private static final int MAX_REJECT_TEXT = 300;

    // ------------------------------------------------------------------------------------------ peers

    void peerLost(Peer p, String reason) {
        if (p.lost) {
            return;
        }
        p.lostReason = reason;
        p.lost = true;
        m.peers.remove(Address.hostPortOf(p.address), p);
        matcher.failPeer(p, what -> m.peerLostError(p, what));
        ImageState img = p.image;
        if (img != null) {
            img.state = ImageState.REFUSED; // whatever it still sends is not this peer's any more
            img.peer = null;
            p.image = null;
            helloPeers--;
        }
        needsControl.remove(p);
        needsEstablish.remove(p);
        m.counters.peersLost.increment();
        if (!m.closing && !CLOSED.equals(reason)) { // an orderly close is no news; its callers still learn of it
            ErrorReporter.info("aeron " + m.name + ": peer " + ErrorReporter.peerText(p.address) + " lost: " + reason);
        }
        p.connection.shutdown();
        if (p.hasArrivals()) {
            p.lingerUntilNs = System.nanoTime() + LINGER_NS;
            lingering.add(p);
        } else {
            forget(p);
        }
        String key = Address.hostPortOf(p.address);
        for (int i = pending.size() - 1; i >= 0; i--) {
            ImageState w = pending.get(i);
            if (Address.hostPortOf(w.pendingAddress).equals(key)) {
                pending.remove(i);
                w.state = ImageState.AWAIT_HELLO;
                bind(w, w.pendingAddress, w.pendingIncarnation, w.pendingAuthenticated);
            }
        }
    }

    private void forget(Peer p) {
        if (p.known) {
            p.known = false;
            matcher.known.remove(p);
        }
        matcher.dropArrivals(p);
    }

    /** A CTS or REJECT for a peer: offered now when possible, else kept in order until it can be. */
    void queueControl(Peer p, int type, int tag, long seq) {
        if (p.pendingControlCount == 0 && p.connection.tryOfferControl(type, tag, seq)) {
            return;
        }
        int at = p.pendingControlCount * 3;
        if (at + 3 > p.pendingControl.length) {
            p.pendingControl = java.util.Arrays.copyOf(p.pendingControl, p.pendingControl.length * 2);
        }
        p.pendingControl[at] = type;
        p.pendingControl[at + 1] = tag;
        p.pendingControl[at + 2] = seq;
        p.pendingControlCount++;
        if (!needsControl.contains(p)) {
            needsControl.add(p);
        }
        if (!p.connection.isEstablished() && !needsEstablish.contains(p)) {
            needsEstablish.add(p);
        }
    }

    private int flushControl() {
        int work = 0;
        for (int i = needsControl.size() - 1; i >= 0; i--) {
            Peer p = needsControl.get(i);
            int sent = 0;
            while (sent < p.pendingControlCount) {
                int at = sent * 3;
                if (!p.connection.tryOfferControl((int) p.pendingControl[at], (int) p.pendingControl[at + 1],
                        p.pendingControl[at + 2])) {
                    break;
                }
                sent++;
            }
            if (sent > 0) {
                work += sent;
                int left = p.pendingControlCount - sent;
                System.arraycopy(p.pendingControl, sent * 3, p.pendingControl, 0, left * 3);
                p.pendingControlCount = left;
            }
            if (p.pendingControlCount == 0) {
                needsControl.remove(i);
            }
        }
        return work;
    }

    // ------------------------------------------------------------------------------------------ periodic

    private int tick(long now) {
        int work = 0;

        for (int i = needsEstablish.size() - 1; i >= 0; i--) {
            Peer p = needsEstablish.get(i);
            if (p.lost || p.connection.progressEstablish(false)) {
                needsEstablish.remove(i);
                work++;
            }
        }
        for (int i = images.size() - 1; i >= 0; i--) {
            ImageState img = images.get(i);
            if (img.state == ImageState.AWAIT_HELLO && now - img.createdNs > m.settings.handshakeTimeoutNs) {
                refuse(img, "no HELLO within " + TimeUnit.NANOSECONDS.toMillis(m.settings.handshakeTimeoutNs) + " ms"
                        + " (stream at " + img.image.position() + ", joined at " + img.image.joinPosition() + ")", false);
            }
        }
        // A held claim waits for the proof that the claimed peer's stream is gone: silent for the peer timeout
        // (UDP), or, on a shared driver, its killed process's client timed out (IPC).
        long pendingLimit = Math.max(m.settings.handshakeTimeoutNs, m.settings.peerTimeoutNs
                + TimeUnit.SECONDS.toNanos(2));
        long ipcPendingLimit = Math.max(pendingLimit, m.settings.clientTimeoutNs + TimeUnit.SECONDS.toNanos(2));
        for (int i = pending.size() - 1; i >= 0; i--) {
            ImageState img = pending.get(i);
            if (now - img.createdNs > (img.ipc ? ipcPendingLimit : pendingLimit)) {
                refuse(img, "it claims " + ErrorReporter.peerText(img.pendingAddress) + ", whose current stream is"
                        + " still alive (a second stream may not join it)", false);
            }
        }
        for (Iterator<Peer> it = lingering.iterator(); it.hasNext(); ) {
            Peer p = it.next();
            if (!p.hasArrivals() || now - p.lingerUntilNs > 0) {
                it.remove();
                forget(p);
                work++;
            }
        }
        trimAwaitingOrder();
        m.counters.earlyBytes.setOrdered(matcher.earlyBytes);
        if (now - nextLivenessNs >= 0) {
            // Our own stall (GC, SIGSTOP, an overloaded host) is not the peers' silence: never-answered clocks
            // restart after one.
            boolean stalled = now - lastLivenessNs > Math.max(TimeUnit.SECONDS.toNanos(1), 10 * LIVENESS_NS);
            lastLivenessNs = now;
            nextLivenessNs = now + LIVENESS_NS;
            work += checkLiveness(now, stalled);
        }
        return work;
    }

    private int checkLiveness(long now, boolean stalled) {
        int lost = 0;
        for (Peer p : m.peers.values()) {
            if (p.lost) {
                continue;
            }
            AeronConnection c = p.connection;
            ImageState img = p.image;
            boolean streamAlive = img != null && !img.image.isClosed();
            int s = c.liveness(now, stalled);
            if (streamAlive) {
                continue; // its stream to us proves it is there, whatever our publication to it says
            }
            if (s == AeronConnection.LOST_AFTER_CONNECTED) {
                peerLost(p, "no status message (it is not there, or stopped) for "
                        + TimeUnit.NANOSECONDS.toMillis(m.settings.peerTimeoutNs) + " ms");
                lost++;
            } else if (s == AeronConnection.NEVER_ANSWERED) {
                peerLost(p, "it never answered (nothing listens there, or it is stopped) within "
                        + TimeUnit.NANOSECONDS.toMillis(m.settings.connectTimeoutNs) + " ms");
                lost++;
            }
        }
        return lost;
    }

    // ------------------------------------------------------------------------------------------ client recovery

    private int checkClient() {
        AeronRuntime rt = m.runtime;
        if (!recovering) {
            Aeron c = rt.client();
            if (rt.generation() == generation && !c.isClosed()) {
                return 0;
            }
            recovering = true;
            recoveryStartNs = System.nanoTime();
            m.counters.recoveries.increment();
            reportError(new TransportException(ErrorCode.NETWORK, "aeron " + m.name + ": the Aeron client closed"
                    + " (a stall longer than the driver timeout, e.g. SIGSTOP or a long GC pause?); every peer is"
                    + " lost, the manager re-subscribes on " + m.localAddress()));
            for (Peer p : new ArrayList<>(m.peers.values())) {
                peerLost(p, "the transport's Aeron client closed (stall)");
            }
            for (ImageState img : new ArrayList<>(images)) {
                retire(img);
            }
            images.clear();
            imagesByKey.clear();
            m.dropSubscriptions();
        }
        long now = System.nanoTime();
        if (rt.generation() == generation && rt.client().isClosed()) {
            if (!rt.recover(generation)) {
                if (now - recoveryStartNs > RECOVERY_LIMIT_NS) {
                    m.fail("the media driver in " + rt.directory() + " could not be reached again within "
                            + TimeUnit.NANOSECONDS.toSeconds(RECOVERY_LIMIT_NS) + " s");
                    recovering = false;
                    generation = -1;
                }
                return 0;
            }
        }
        if (rt.generation() != generation) {
            // A newer client (ours, or rebuilt by another manager of this process): subscribe again with it.
            generation = rt.generation();
            udpRegistration = -1;
            ipcRegistration = -1;
            nextResubscribeNs = now;
        }
        if (now - nextResubscribeNs < 0) {
            return 0;
        }
        Aeron c = rt.client();
        try {
            if (m.subscription(false) == null) {
                if (udpRegistration < 0) {
                    udpRegistration = c.asyncAddSubscription(m.udpChannel(), AeronSettings.STREAM_ID,
                            image -> onAvailable(image, false), image -> onUnavailable(image, false));
                }
                Subscription s = c.getSubscription(udpRegistration);
                if (s != null) {
                    m.subscription(false, s);
                }
            }
            if (m.ipcStream() != 0 && m.subscription(true) == null) {
                if (ipcRegistration < 0) {
                    ipcRegistration = c.asyncAddSubscription(AeronSettings.IPC_CHANNEL, m.ipcStream(),
                            image -> onAvailable(image, true), image -> onUnavailable(image, true));
                }
                Subscription s = c.getSubscription(ipcRegistration);
                if (s != null) {
                    m.subscription(true, s);
                }
            }
        } catch (RegistrationException e) {
            // Most likely our old socket is not released yet by the driver: try again shortly.
            udpRegistration = m.subscription(false) == null ? -1 : udpRegistration;
            ipcRegistration = m.subscription(true) == null ? -1 : ipcRegistration;
            nextResubscribeNs = now + RESUBSCRIBE_RETRY_NS;
            if (now - recoveryStartNs > RECOVERY_LIMIT_NS) {
                m.fail("cannot listen on " + m.localAddress() + " again after the client closed: " + e.getMessage());
                recovering = false;
            }
            return 0;
        } catch (RuntimeException e) {
            nextResubscribeNs = now + RESUBSCRIBE_RETRY_NS;
            reportError(e);
            return 0;
        }
        if (m.subscription(false) != null && (m.ipcStream() == 0 || m.subscription(true) != null)) {
            recovering = false;
            LOG.log(Level.WARNING, "aeron " + m.name + ": serving again on " + m.localAddress() + " after the client"
                    + " was rebuilt (" + TimeUnit.NANOSECONDS.toMillis(now - recoveryStartNs) + " ms)");
        }
        return 1;
    }

    // ------------------------------------------------------------------------------------------ shutdown

    /** The manager closes: fail every waiting op at once (callers wake with TransportClosedException). */
    private void sweep() {
        Function<String, TransportException> why = what -> m.closedError(what);
        matcher.failAll(why);
        sweepDone = true;
    }

    /**
     * Last cleanup, on the group's thread (or the closer's once the group stopped): fail what is left, free every
     * early message. After this nothing of ours touches the manager's state or any caller's memory.
     */
    void onRemoved() {
        if (!removalStarted.compareAndSet(false, true)) {
            return;
        }
        duty.lock(); // a polling caller holds it for one cycle at most
        try {
            Op op;
            while ((op = commands.poll()) != null) {
                if (op.casState(Op.QUEUED, Op.POSTED) || op.cancelRequested) {
                    op.fail(new TransportClosedException("aeron " + m.name + " closed"));
                }
            }
            matcher.failAll(what -> m.closedError(what));
            posted.failAll(m.closedError("posted recv"));
            for (Peer p : new ArrayList<>(matcher.known)) {
                matcher.dropArrivals(p);
            }
            for (Peer p : lingering) {
                matcher.dropArrivals(p);
            }
            lingering.clear();
            for (ImageState img : images) {
                if (img.assemble == ImageState.ASSEMBLE_STAGED && img.arrival != null) {
                    matcher.pool.give(img.arrival);
                    img.arrival = null;
                }
            }
            images.clear();
            imagesByKey.clear();
            matcher.pool.close();
        } finally {
            sweepDone = true;
            removed = true;
            duty.unlock();
        }
    }

    /** A rejected publication of ours. */
    private record Rejection(long registrationId, String reason) {
    }

    /** An image event from the client conductor. */
    private record ImageEvent(Image image, boolean ipc, boolean available) {
    }
}
