package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.BootstrapFrames.CONFIRM;
import static dev.kvtransfer.ucx.BootstrapFrames.READY;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_CONFIRM;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_READY;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_WELCOME;
import static dev.kvtransfer.ucx.BootstrapSession.CLOSED;
import static dev.kvtransfer.ucx.BootstrapSession.ESTABLISHED;

/**
 * What the bootstrap's handshake frames mean: HELLO (dialer) &rarr; WELCOME (acceptor) &rarr; CONFIRM (dialer)
 * &rarr; READY (acceptor), their MACs ({@link BootstrapAuth}), the checks on the peer (mode, host, freshness,
 * replay, the address meant) and the binding of a peer's identity (instance id, worker address, sender id) to its
 * connection. A session that completes opens the connection's UCX endpoint on the progress agent.
 *
 * <p><b>Identity is bound to the session.</b> A connection is keyed by the peer's address; the first session
 * that completes for it binds the peer's instance id and worker address. A later hello claiming the same address
 * joins only if it names the same instance and worker (crossed dials); any other claim is refused while the
 * connection lives and can never tear it down or rebind it. An unauthenticated hello creates nothing (the
 * connection object is made only after the confirm), so hostile hellos leave no state behind.
 *
 * <p>The socket side (reading and writing frames, timers, closing sessions) is {@link BootstrapAgent}'s; this
 * class only decides, and answers through the agent. Bootstrap agent thread only, like every session it touches.
 */
final class BootstrapHandshake {
    private final BootstrapAgent agent;
    private final UcxConnectionManager manager;
    private final UcxSettings settings;
    private final BootstrapAuth auth;
    private final BootstrapAgent.Identity me;
    private final ProgressAgent progress;
    private final TagMatcher matcher;

    BootstrapHandshake(BootstrapAgent agent, UcxConnectionManager manager, UcxSettings settings, BootstrapAuth auth,
                       BootstrapAgent.Identity me, ProgressAgent progress, TagMatcher matcher) {
        this.agent = agent;
        this.manager = manager;
        this.settings = settings;
        this.auth = auth;
        this.me = me;
        this.progress = progress;
        this.matcher = matcher;
    }

    /** Dialer, connected: sends HELLO (fields and MAC; kept, later MACs cover it). */
    void sendHello(BootstrapSession s) {
        s.myNonce = auth.nonce();
        BootstrapFrames.Hello h = new BootstrapFrames.Hello(me.instance(), s.myNonce, System.currentTimeMillis(),
                manager.localAddress(), s.conn.peer, me.hostId(), me.mode(), s.conn.inId, me.worker());
        ByteBuffer fields = BootstrapFrames.encode(h);
        s.helloBytes = withMac(fields, auth.enabled() ? auth.helloMac(fields) : new byte[BootstrapAuth.MAC_BYTES]);
        s.state = AWAIT_WELCOME;
        agent.sendRaw(s, s.helloBytes.duplicate());
    }

    private static ByteBuffer withMac(ByteBuffer fields, byte[] mac) {
        ByteBuffer b = BootstrapFrames.buffer(fields.remaining() + mac.length);
        b.put(fields.duplicate()).put(mac).flip();
        return b;
    }

    /** Splits a handshake payload into its fields and its trailing MAC. */
    private static ByteBuffer[] splitMac(ByteBuffer payload) throws BootstrapFrames.Violation {
        if (payload.remaining() < 1 + BootstrapAuth.MAC_BYTES) {
            throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "handshake frame of " + payload.remaining()
                    + " bytes is shorter than its MAC");
        }
        ByteBuffer fields = payload.duplicate();
        fields.limit(payload.limit() - BootstrapAuth.MAC_BYTES);
        ByteBuffer mac = payload.duplicate();
        mac.position(payload.limit() - BootstrapAuth.MAC_BYTES);
        return new ByteBuffer[] {fields, mac};
    }

    static byte[] bytes(ByteBuffer b) {
        byte[] v = new byte[b.remaining()];
        b.duplicate().get(v);
        return v;
    }

    /** Acceptor: checks a HELLO (MAC, freshness, address meant, replay, mode, host, identity), answers WELCOME. */
    void onHello(BootstrapSession s, ByteBuffer payload) throws BootstrapFrames.Violation {
        ByteBuffer[] parts = splitMac(payload);
        BootstrapFrames.Hello h = BootstrapFrames.decodeHello(parts[0]);
        if (auth.enabled()) {
            if (!BootstrapAuth.equal(auth.helloMac(parts[0]), bytes(parts[1]))) {
                throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "hello with a wrong MAC (the peer does "
                        + "not hold this deployment's secret)");
            }
            if (!auth.fresh(h.timestamp())) {
                throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "hello timestamp "
                        + (System.currentTimeMillis() - h.timestamp()) + " ms away from this clock (at most "
                        + settings.authMaxSkewMillis() + ")");
            }
            if (!UcxAddresses.sameEndpoint(h.target(), manager.localAddress())) {
                throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "hello meant for "
                        + UcxErrors.quote(h.target()) + " reached " + manager.localAddress());
            }
            if (!auth.firstUse(h.nonce())) {
                throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "replayed hello (nonce seen before)");
            }
        }
        checkPeer(h.mode(), h.hostId());
        String why = UcxAddresses.syntaxError(h.address());
        if (why != null) {
            throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "hello address " + UcxErrors.quote(h.address())
                    + ": " + why);
        }
        UcxConnection existing = manager.existing(h.address());
        String conflict = conflict(existing, h.instance(), h.worker(), h.senderIdForYou());
        if (conflict != null) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, conflict);
        }
        s.hello = h;
        s.helloBytes = copy(payload);
        s.myNonce = auth.nonce();
        s.offeredSenderId = live(existing) ? existing.inId : manager.reserveSenderId();
        BootstrapFrames.Welcome w = new BootstrapFrames.Welcome(me.instance(), s.myNonce, System.currentTimeMillis(),
                me.hostId(), me.mode(), s.offeredSenderId, me.worker());
        ByteBuffer fields = BootstrapFrames.encode(w);
        s.welcomeBytes = withMac(fields, auth.enabled() ? auth.welcomeMac(s.helloBytes, fields)
                : new byte[BootstrapAuth.MAC_BYTES]);
        s.state = AWAIT_CONFIRM;
        agent.sendRaw(s, s.welcomeBytes.duplicate());
    }

    private void checkPeer(int mode, byte[] hostId) throws BootstrapFrames.Violation {
        if (mode != me.mode()) {
            throw new BootstrapFrames.Violation(ErrorCode.NETWORK, "peer runs in " + modeName(mode) + " mode, this "
                    + "manager in " + modeName(me.mode()) + " mode (" + UcxSettings.TRANSPORTS + ")");
        }
        if (mode == BootstrapFrames.MODE_SHM && !Arrays.equals(hostId, me.hostId())) {
            throw new BootstrapFrames.Violation(ErrorCode.NETWORK, "peer is on another host (or IPC namespace): "
                    + "shared memory cannot reach it; give both a routable address or set "
                    + UcxSettings.TRANSPORTS + "=net");
        }
    }

    private static String modeName(int mode) {
        return mode == BootstrapFrames.MODE_SHM ? "shm" : "net";
    }

    /** Acceptor: checks CONFIRM, binds (or joins) the connection, establishes the session and sends READY. */
    void onConfirm(BootstrapSession s, ByteBuffer payload) throws BootstrapFrames.Violation {
        BootstrapFrames.Reader r = new BootstrapFrames.Reader(payload);
        r.expectType(CONFIRM);
        byte[] mac = r.fixed("MAC", BootstrapAuth.MAC_BYTES);
        r.end();
        if (auth.enabled() && !BootstrapAuth.equal(auth.confirmMac(s.helloBytes, s.welcomeBytes), mac)) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "confirm with a wrong MAC");
        }
        BootstrapFrames.Hello h = s.hello;
        UcxConnection c = manager.existing(h.address());
        String conflict = conflict(c, h.instance(), h.worker(), h.senderIdForYou());
        if (conflict != null) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, conflict);
        }
        if (!live(c)) {
            UcxConnection made = manager.createConnection(h.address(), s.offeredSenderId);
            if (made == null) {
                // Crossed dials: a local dial (another thread) created the connection between the look above
                // and the create. Join it, as a hello arriving after that dial would have.
                made = manager.existing(h.address());
                conflict = conflict(made, h.instance(), h.worker(), h.senderIdForYou());
                if (conflict != null) {
                    throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, conflict);
                }
                if (!live(made)) {
                    throw new BootstrapFrames.Violation(ErrorCode.NETWORK, "a connection to " + UcxErrors.quote(
                            h.address()) + " appeared and failed during the handshake; dial again");
                }
            }
            c = made;
        }
        // The welcome's sender id was provisional: a local dial may have created the connection since. READY
        // carries the final one.
        s.conn = c;
        s.sessionKey = auth.sessionKey(h.nonce(), s.myNonce, h.instance(), me.instance());
        establish(s, h.instance(), h.worker(), h.senderIdForYou());
        ByteBuffer ready = BootstrapFrames.buffer(4);
        ready.putInt(c.inId).flip();
        agent.sendFrame(s, READY, ready);
    }

    /** Dialer: checks WELCOME (MAC, mode, host, identity) and answers CONFIRM. */
    void onWelcome(BootstrapSession s, ByteBuffer payload) throws BootstrapFrames.Violation {
        ByteBuffer[] parts = splitMac(payload);
        BootstrapFrames.Welcome w = BootstrapFrames.decodeWelcome(parts[0]);
        if (auth.enabled() && !BootstrapAuth.equal(auth.welcomeMac(s.helloBytes, parts[0]), bytes(parts[1]))) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "welcome with a wrong MAC (the peer does not"
                    + " hold this deployment's secret)");
        }
        checkPeer(w.mode(), w.hostId());
        String conflict = conflict(s.conn, w.instance(), w.worker(), s.conn.peerInstance == 0 ? 0
                : s.conn.peerSenderId); // its sender id is provisional until READY
        if (conflict != null) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, conflict);
        }
        s.welcome = w;
        s.welcomeBytes = copy(payload);
        ByteBuffer confirm = BootstrapFrames.buffer(1 + BootstrapAuth.MAC_BYTES);
        confirm.put((byte) CONFIRM).put(auth.enabled() ? auth.confirmMac(s.helloBytes, s.welcomeBytes)
                : new byte[BootstrapAuth.MAC_BYTES]).flip();
        s.state = AWAIT_READY;
        agent.sendRaw(s, confirm);
        s.sessionKey = auth.sessionKey(s.myNonce, w.nonce(), me.instance(), w.instance());
    }

    /** Dialer: READY with the final sender id establishes the session. */
    void onReady(BootstrapSession s, int senderId) {
        BootstrapFrames.Welcome w = s.welcome;
        UcxConnection c = s.conn;
        if (c.failure != null || c.controlLost) {
            agent.close(s, ErrorCode.PEER_LOST, "connection failed during the handshake");
            return;
        }
        String conflict = conflict(c, w.instance(), w.worker(), senderId);
        if (conflict != null) {
            agent.close(s, ErrorCode.UNAUTHORIZED, conflict);
            return;
        }
        c.dialing--;
        establish(s, w.instance(), w.worker(), senderId);
    }

    /**
     * Why a peer claiming a connection may not (also) be it; null when it may: the connection is absent or dead,
     * unbound (this side is still dialing), or bound to the same instance and worker with the same sender id.
     */
    private String conflict(UcxConnection c, long instance, byte[] worker, int peerSenderId) {
        if (!live(c) || c.peerInstance == 0) {
            return null;
        }
        if (c.peerInstance == instance && Arrays.equals(c.peerWorker, worker) && c.peerSenderId == peerSenderId) {
            return null;
        }
        // The bound peer may just have gone away (its EOF or BYE not yet read): look before refusing.
        pump(c);
        if (!live(c)) {
            return null;
        }
        return "the connection to " + c.peer + " is bound to another peer session (instance "
                + Long.toHexString(c.peerInstance) + "); a hello claiming it from instance "
                + Long.toHexString(instance) + " neither tears it down nor rebinds it";
    }

    private static boolean live(UcxConnection c) {
        return c != null && c.failure == null && !c.controlLost;
    }

    /** Reads whatever the connection's sessions have pending (so a closed peer is noticed now). */
    private void pump(UcxConnection c) {
        for (BootstrapSession s : new ArrayList<>(c.sessions)) {
            if (s.state != CLOSED) {
                agent.readable(s);
            }
        }
    }

    private void establish(BootstrapSession s, long instance, byte[] worker, int peerSenderId) {
        UcxConnection c = s.conn;
        long now = System.nanoTime();
        s.state = ESTABLISHED;
        s.lastHeardNanos = now;
        s.deadlineNanos = 0;
        agent.timerAt(now + TimeUnit.MILLISECONDS.toNanos(settings.livenessIntervalMillis()));
        c.sessions.add(s);
        Object[] queued;
        while ((queued = c.controlBacklog.poll()) != null) {
            agent.sendFrame(s, (Integer) queued[0], (ByteBuffer) queued[1]);
        }
        if (c.peerInstance == 0) {
            c.peerInstance = instance;
            c.peerWorker = worker.clone();
            c.peerSenderId = peerSenderId;
            boolean peerMode = me.mode() == BootstrapFrames.MODE_NET;
            byte[] w = c.peerWorker;
            progress.submitAlways(new UcxCommand() {
                @Override
                public void run() {
                    matcher.openEndpoint(c, w, peerSenderId, peerMode);
                }

                @Override
                public void abort(UcxFailure f) {
                    // Closing: the connection fails with the manager.
                }
            });
        }
    }

    private static ByteBuffer copy(ByteBuffer b) {
        ByteBuffer c = BootstrapFrames.buffer(b.remaining());
        c.put(b.duplicate()).flip();
        return c;
    }
}
