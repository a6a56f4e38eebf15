package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static dev.kvtransfer.ucx.BootstrapFrames.BYE;
import static dev.kvtransfer.ucx.BootstrapFrames.CONFIRM;
import static dev.kvtransfer.ucx.BootstrapFrames.HELLO;
import static dev.kvtransfer.ucx.BootstrapFrames.PING;
import static dev.kvtransfer.ucx.BootstrapFrames.READY;
import static dev.kvtransfer.ucx.BootstrapFrames.REFUSE;
import static dev.kvtransfer.ucx.BootstrapFrames.WELCOME;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_CONFIRM;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_HELLO;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_READY;
import static dev.kvtransfer.ucx.BootstrapSession.AWAIT_WELCOME;
import static dev.kvtransfer.ucx.BootstrapSession.CLOSED;
import static dev.kvtransfer.ucx.BootstrapSession.CONNECTING;
import static dev.kvtransfer.ucx.BootstrapSession.ESTABLISHED;

/**
 * Our own bootstrap in place of UCX's sockaddr listener: a plain NIO TCP listener bound only to the configured
 * address, where peers authenticate ({@link BootstrapAuth}) and exchange UCX worker addresses
 * ({@link BootstrapFrames}); endpoints are then created by worker address on the progress agent, so no
 * unauthenticated process ever reaches UCX. The TCP connection stays open as the control connection: its
 * liveness (PING every {@code ucx.livenessIntervalMillis}, dead after {@code ucx.livenessTimeoutMillis} of
 * silence, at once on EOF or reset) is how a lost peer is detected, and it carries the one-sided write
 * protocol's validations and revocations. An Agrona {@code Agent}: it sleeps in {@link Selector#select} between
 * events and timers ({@link SelectorIdleStrategy}); other threads hand it work through {@link #execute}.
 *
 * <p>The handshake's meaning (MACs, peer checks, the binding of a peer's identity to its connection) is
 * {@link BootstrapHandshake}'s; this class owns the sockets: accept and dial, framing, liveness timers, closing.
 */
final class BootstrapAgent implements Agent {
    /** What the agent knows about itself and tells peers. */
    record Identity(long instance, byte[] hostId, int mode, byte[] worker) {
    }

    /** What the one-sided write protocol does with its control frames (set when RMA is wired). */
    interface ControlFrames {
        /** @return whether the frame type was handled */
        boolean onFrame(UcxConnection c, int type, BootstrapFrames.Reader body) throws BootstrapFrames.Violation;
    }

    private final UcxSettings settings;
    private final UcxErrors errors;
    private final UcxLifecycle life;
    private final BootstrapAuth auth;
    private final BootstrapHandshake handshake;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final ProgressAgent progress;
    private final TagMatcher matcher;
    private final ConcurrentLinkedQueue<Runnable> inbox = new ConcurrentLinkedQueue<>();
    private final Set<BootstrapSession> sessions = new LinkedHashSet<>();
    private final AtomicLong refusedHandshakes = new AtomicLong();
    private final AtomicLong acceptedSessions = new AtomicLong();
    private final String roleName;
    private ControlFrames control = (c, type, body) -> false;
    private java.util.function.Consumer<UcxConnection> onControlLost = c -> { };
    private long nextTimerNanos;

    BootstrapAgent(UcxConnectionManager manager, UcxSettings settings, UcxErrors errors, UcxLifecycle life,
                   BootstrapAuth auth, Identity me, ServerSocketChannel server, Selector selector,
                   ProgressAgent progress, TagMatcher matcher) {
        this.settings = settings;
        this.errors = errors;
        this.life = life;
        this.auth = auth;
        this.server = server;
        this.selector = selector;
        this.progress = progress;
        this.matcher = matcher;
        this.handshake = new BootstrapHandshake(this, manager, settings, auth, me, progress, matcher);
        this.roleName = "ucx-bootstrap-" + settings.name();
        this.nextTimerNanos = System.nanoTime();
    }

    void control(ControlFrames c, java.util.function.Consumer<UcxConnection> lost) {
        this.control = c;
        this.onControlLost = lost;
    }

    Selector selector() {
        return selector;
    }

    long refusedHandshakes() {
        return refusedHandshakes.get();
    }

    long acceptedSessions() {
        return acceptedSessions.get();
    }

    /** Runs work on the agent's thread (any thread may call). */
    void execute(Runnable r) {
        inbox.add(r);
        selector.wakeup();
    }

    /** @return when the next timer is due ({@link System#nanoTime()}), for the idle strategy */
    long nextTimerNanos() {
        return nextTimerNanos;
    }

    @Override
    public String roleName() {
        return roleName;
    }

    @Override
    public int doWork() throws Exception {
        if (!life.running()) {
            throw new AgentTerminationException();
        }
        int work = 0;
        Runnable r;
        while ((r = inbox.poll()) != null) {
            work++;
            try {
                r.run();
            } catch (RuntimeException e) {
                errors.report("bootstrap", new TransportException(ErrorCode.INTERNAL, roleName + ": " + e, e));
            }
        }
        if (selector.selectNow() > 0 || !selector.selectedKeys().isEmpty()) {
            Iterator<SelectionKey> it = selector.selectedKeys().iterator();
            while (it.hasNext()) {
                SelectionKey k = it.next();
                it.remove();
                work++;
                if (k.attachment() == null) {
                    accept();
                } else {
                    BootstrapSession s = (BootstrapSession) k.attachment();
                    if (!k.isValid()) {
                        continue;
                    }
                    if (k.isConnectable()) {
                        finishConnect(s);
                    }
                    if (s.state != CLOSED && k.isValid() && k.isWritable()) {
                        flush(s);
                    }
                    if (s.state != CLOSED && k.isValid() && k.isReadable()) {
                        readable(s);
                    }
                }
            }
        }
        long now = System.nanoTime();
        if (now - nextTimerNanos >= 0) {
            work += timers(now);
        }
        return work;
    }

    @Override
    public void onClose() {
        for (BootstrapSession s : new ArrayList<>(sessions)) {
            if (s.established()) {
                sendFrame(s, BYE, empty());
            }
            closeChannel(s, "manager closed");
        }
        sessions.clear();
        Runnable r;
        while ((r = inbox.poll()) != null) {
            // Work queued for a closing bootstrap: dials fail with the connection's own close.
        }
        try {
            server.close();
        } catch (IOException e) {
            errors.report("close", new TransportException(ErrorCode.NETWORK, roleName + ": closing the listener: "
                    + e, e));
        }
        try {
            selector.close();
        } catch (IOException e) {
            errors.report("close", new TransportException(ErrorCode.NETWORK, roleName + ": closing the selector: "
                    + e, e));
        }
    }

    // ------------------------------------------------------------------ accept and dial

    private void accept() {
        while (true) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (IOException e) {
                errors.report("accept", new TransportException(ErrorCode.NETWORK, roleName + ": accept failed: " + e,
                        e));
                return;
            }
            if (ch == null) {
                return;
            }
            String remote = remoteOf(ch);
            try {
                ch.configureBlocking(false);
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            } catch (IOException e) {
                quietClose(ch);
                continue;
            }
            evictIfTooManyPending();
            long now = System.nanoTime();
            BootstrapSession s = new BootstrapSession(ch, false, remote, now);
            s.deadlineNanos = now + TimeUnit.MILLISECONDS.toNanos(settings.handshakeTimeoutMillis());
            register(s, SelectionKey.OP_READ);
            acceptedSessions.incrementAndGet();
            timerAt(s.deadlineNanos);
        }
    }

    /** Too many handshakes at once (a flood, or slow peers): the oldest pending one goes, not the newcomer. */
    private void evictIfTooManyPending() {
        int pending = 0;
        BootstrapSession oldest = null;
        for (BootstrapSession s : sessions) {
            if (!s.dialer && s.state != ESTABLISHED) {
                pending++;
                if (oldest == null || s.createdNanos - oldest.createdNanos < 0) {
                    oldest = s;
                }
            }
        }
        if (pending >= settings.maxPendingHandshakes() && oldest != null) {
            refuse(oldest, ErrorCode.NETWORK, "too many handshakes in progress (" + pending + ")", false);
        }
    }

    /** Dials a connection's peer (from {@link UcxConnectionManager#connection}). */
    void dial(UcxConnection c) {
        if (c.failure != null || c.controlLost) {
            return;
        }
        InetSocketAddress to;
        try {
            to = UcxAddresses.parse(c.peer);
        } catch (IllegalArgumentException e) {
            lose(c, ErrorCode.NETWORK, "bad UCX address " + UcxErrors.quote(c.peer) + ": " + e.getMessage());
            return;
        }
        SocketChannel ch = null;
        try {
            ch = SocketChannel.open();
            ch.configureBlocking(false);
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            long now = System.nanoTime();
            BootstrapSession s = new BootstrapSession(ch, true, c.peer, now);
            s.conn = c;
            s.deadlineNanos = now + TimeUnit.MILLISECONDS.toNanos(settings.handshakeTimeoutMillis());
            c.dialing++;
            boolean connected = ch.connect(to);
            register(s, connected ? SelectionKey.OP_READ : SelectionKey.OP_CONNECT);
            timerAt(s.deadlineNanos);
            if (connected) {
                handshake.sendHello(s);
            }
        } catch (IOException | RuntimeException e) {
            if (ch != null) {
                quietClose(ch);
            }
            lose(c, ErrorCode.PEER_LOST, "cannot connect to " + c.peer + ": " + e);
        }
    }

    private void finishConnect(BootstrapSession s) {
        try {
            if (s.channel.finishConnect()) {
                s.key.interestOps(SelectionKey.OP_READ);
                handshake.sendHello(s);
            }
        } catch (IOException e) {
            close(s, ErrorCode.PEER_LOST, "cannot connect to " + s.remote + ": " + e.getMessage());
        }
    }

    private void register(BootstrapSession s, int ops) {
        try {
            s.key = s.channel.register(selector, ops, s);
            sessions.add(s);
        } catch (IOException e) {
            quietClose(s.channel);
            s.state = CLOSED;
        }
    }

    // ------------------------------------------------------------------ frames in

    void readable(BootstrapSession s) {
        try {
            int n = s.channel.read(s.in);
            if (n > 0) {
                s.lastHeardNanos = System.nanoTime();
            }
            ByteBuffer in = s.in;
            while (s.state != CLOSED && in.position() >= 4) {
                int len = in.getInt(0);
                if (len <= 0 || len > BootstrapFrames.MAX_FRAME) {
                    throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "frame length "
                            + Integer.toUnsignedString(len) + " (at most " + BootstrapFrames.MAX_FRAME + ")");
                }
                int end = 4 + len;
                if (in.position() < end) {
                    break;
                }
                ByteBuffer payload = in.duplicate();
                payload.position(4).limit(end);
                frame(s, payload.slice().order(ByteOrder.LITTLE_ENDIAN));
                if (s.state == CLOSED) {
                    return;
                }
                int filled = in.position();
                in.limit(filled).position(end);
                in.compact(); // keeps the bytes of the next frame
            }
            if (n < 0 && s.state != CLOSED) {
                close(s, ErrorCode.PEER_LOST, s.established() ? "peer " + s.remote + " closed its control connection"
                        : "closed by " + s.remote + " during the handshake");
            }
        } catch (BootstrapFrames.Violation v) {
            refuse(s, v.code, v.getMessage(), true);
        } catch (IOException e) {
            close(s, ErrorCode.PEER_LOST, (s.established() ? "control connection to " : "handshake with ") + s.remote
                    + " failed: " + e.getMessage());
        }
    }

    private void frame(BootstrapSession s, ByteBuffer payload) throws BootstrapFrames.Violation {
        int type = payload.get(0) & 0xff;
        if (type == REFUSE && !s.established()) {
            BootstrapFrames.Reader r = new BootstrapFrames.Reader(payload);
            r.expectType(REFUSE);
            int code = r.u8("code");
            String reason = r.string("reason", BootstrapFrames.MAX_REASON);
            ErrorCode ec = code < ErrorCode.values().length ? ErrorCode.values()[code] : ErrorCode.NETWORK;
            close(s, ec, s.remote + " refused the handshake: " + UcxErrors.quote(reason));
            return;
        }
        switch (s.state) {
            case AWAIT_HELLO -> {
                expect(payload, HELLO);
                handshake.onHello(s, payload);
            }
            case AWAIT_WELCOME -> {
                expect(payload, WELCOME);
                handshake.onWelcome(s, payload);
            }
            case AWAIT_CONFIRM -> {
                expect(payload, CONFIRM);
                handshake.onConfirm(s, payload);
            }
            case AWAIT_READY -> {
                BootstrapFrames.Reader r = new BootstrapFrames.Reader(verified(s, payload));
                r.expectType(READY);
                int finalSenderId = r.senderId();
                r.end();
                handshake.onReady(s, finalSenderId);
            }
            case ESTABLISHED -> established(s, verified(s, payload));
            default -> throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "frame in state " + s.state);
        }
    }

    private static void expect(ByteBuffer payload, int type) throws BootstrapFrames.Violation {
        int t = payload.get(0) & 0xff;
        if (t != type) {
            throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "frame type " + t + " where " + type
                    + " was expected");
        }
    }

    /** Checks (with a secret) and strips a post-handshake frame's tag; returns type + body. */
    private ByteBuffer verified(BootstrapSession s, ByteBuffer payload) throws BootstrapFrames.Violation {
        if (s.sessionKey == null) {
            s.recvSeq++;
            return payload;
        }
        if (payload.remaining() < 1 + BootstrapAuth.TAG_BYTES) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "control frame without its tag");
        }
        ByteBuffer body = payload.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        body.limit(payload.limit() - BootstrapAuth.TAG_BYTES);
        ByteBuffer tag = payload.duplicate();
        tag.position(payload.limit() - BootstrapAuth.TAG_BYTES);
        byte[] want = auth.frameTag(s.sessionKey, s.receiveDirection(), s.recvSeq, body);
        if (!BootstrapAuth.equal(want, BootstrapHandshake.bytes(tag))) {
            throw new BootstrapFrames.Violation(ErrorCode.UNAUTHORIZED, "control frame " + s.recvSeq
                    + " with a wrong tag (forged, replayed or reordered)");
        }
        s.recvSeq++;
        return body.slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    private void established(BootstrapSession s, ByteBuffer body) throws BootstrapFrames.Violation {
        int type = body.get(0) & 0xff;
        switch (type) {
            case PING -> {
                // Liveness only.
            }
            case BYE -> close(s, ErrorCode.PEER_LOST, "peer " + s.remote + " closed");
            default -> {
                BootstrapFrames.Reader r = new BootstrapFrames.Reader(body);
                r.u8("type");
                if (!control.onFrame(s.conn, type, r)) {
                    throw new BootstrapFrames.Violation(ErrorCode.MALFORMED, "unknown control frame type " + type);
                }
            }
        }
    }

    // ------------------------------------------------------------------ frames out

    private static ByteBuffer empty() {
        return BootstrapFrames.buffer(0);
    }

    /** Sends a post-handshake frame (type + body, tagged with a secret) on one session. */
    void sendFrame(BootstrapSession s, int type, ByteBuffer body) {
        ByteBuffer f = BootstrapFrames.buffer(1 + body.remaining() + (s.sessionKey != null ? BootstrapAuth.TAG_BYTES
                : 0));
        f.put((byte) type).put(body.duplicate());
        if (s.sessionKey != null) {
            ByteBuffer typed = f.duplicate().flip();
            f.put(auth.frameTag(s.sessionKey, s.sendDirection(), s.sendSeq, typed));
        }
        s.sendSeq++;
        sendRaw(s, f.flip());
    }

    /**
     * Sends a control frame now if the connection has an established session, else once its handshake
     * finished; runs {@code onFail} when the connection is (or becomes) dead first.
     */
    void sendControlWhenEstablished(UcxConnection c, int type, ByteBuffer body, Runnable onFail) {
        if (sendControl(c, type, body)) {
            return;
        }
        if (c.failure != null || c.controlLost) {
            onFail.run();
            return;
        }
        c.controlBacklog.add(new Object[] {type, body, onFail});
    }

    /**
     * Sends a control frame to a connection's peer on one of its established sessions.
     *
     * @return false when the connection has no established session
     */
    boolean sendControl(UcxConnection c, int type, ByteBuffer body) {
        for (BootstrapSession s : c.sessions) {
            if (s.established()) {
                sendFrame(s, type, body);
                return true;
            }
        }
        return false;
    }

    void sendRaw(BootstrapSession s, ByteBuffer payload) {
        if (s.state == CLOSED) {
            return;
        }
        ByteBuffer f = BootstrapFrames.buffer(4 + payload.remaining());
        f.putInt(payload.remaining()).put(payload).flip();
        s.queuedBytes += f.remaining();
        s.out.add(f);
        s.lastSentNanos = System.nanoTime();
        if (s.queuedBytes > BootstrapSession.MAX_QUEUED_BYTES) {
            close(s, ErrorCode.PEER_LOST, "peer " + s.remote + " does not read its control connection ("
                    + s.queuedBytes + " bytes queued)");
            return;
        }
        flush(s);
    }

    private void flush(BootstrapSession s) {
        try {
            ByteBuffer b;
            while ((b = s.out.peek()) != null) {
                int n = s.channel.write(b);
                s.queuedBytes -= n;
                if (b.hasRemaining()) {
                    break;
                }
                s.out.poll();
            }
            if (s.key != null && s.key.isValid() && s.state != CONNECTING) {
                s.key.interestOps(s.out.isEmpty() ? SelectionKey.OP_READ
                        : SelectionKey.OP_READ | SelectionKey.OP_WRITE);
            }
        } catch (IOException e) {
            close(s, ErrorCode.PEER_LOST, "writing to " + s.remote + " failed: " + e.getMessage());
        }
    }

    // ------------------------------------------------------------------ timers

    void timerAt(long when) {
        if (when - nextTimerNanos < 0) {
            nextTimerNanos = when;
        }
    }

    private int timers(long now) {
        int work = 0;
        long interval = TimeUnit.MILLISECONDS.toNanos(settings.livenessIntervalMillis());
        long timeout = TimeUnit.MILLISECONDS.toNanos(settings.livenessTimeoutMillis());
        long next = now + interval;
        for (BootstrapSession s : new ArrayList<>(sessions)) {
            if (s.state == CLOSED) {
                continue;
            }
            if (!s.established()) {
                if (now - s.deadlineNanos >= 0) {
                    work++;
                    if (s.dialer) {
                        close(s, ErrorCode.PEER_LOST, "handshake with " + s.remote + " did not complete within "
                                + settings.handshakeTimeoutMillis() + " ms");
                    } else {
                        refuse(s, ErrorCode.TIMEOUT, "handshake did not complete within "
                                + settings.handshakeTimeoutMillis() + " ms", false);
                    }
                } else if (s.deadlineNanos - next < 0) {
                    next = s.deadlineNanos;
                }
                continue;
            }
            if (now - s.lastHeardNanos >= timeout) {
                work++;
                close(s, ErrorCode.PEER_LOST, "no control traffic from " + s.remote + " for "
                        + TimeUnit.NANOSECONDS.toMillis(now - s.lastHeardNanos) + " ms (timeout "
                        + settings.livenessTimeoutMillis() + " ms)");
                continue;
            }
            if (now - s.lastSentNanos >= interval) {
                work++;
                sendFrame(s, PING, empty());
            }
            long due = Math.min(s.lastSentNanos + interval, s.lastHeardNanos + timeout);
            if (due - next < 0) {
                next = due;
            }
        }
        nextTimerNanos = next;
        return work;
    }

    // ------------------------------------------------------------------ closing

    /** Refuses a handshake (or ends a session that broke the protocol): tells the peer why, counts, reports. */
    private void refuse(BootstrapSession s, ErrorCode code, String why, boolean report) {
        boolean counted = !(s.dialer || s.established());
        if (counted) {
            refusedHandshakes.incrementAndGet(); // before the peer can read the refusal
        }
        if (s.state != CLOSED && !s.established()) {
            ByteBuffer r = BootstrapFrames.buffer(4 + BootstrapFrames.MAX_REASON);
            byte[] reason = why.getBytes(StandardCharsets.UTF_8);
            int n = Math.min(reason.length, BootstrapFrames.MAX_REASON);
            while (n > 0 && n < reason.length && (reason[n] & 0xc0) == 0x80) {
                n--; // do not cut a UTF-8 sequence
            }
            r.put((byte) REFUSE).put((byte) code.ordinal()).putShort((short) n).put(reason, 0, n).flip();
            sendRaw(s, r);
        }
        if (s.dialer || s.established()) {
            close(s, code, why);
        } else {
            closeChannel(s, why);
        }
        if (report) {
            errors.report(code == ErrorCode.UNAUTHORIZED ? "unauthorized" : "handshake", new TransportException(code,
                    roleName + ": refused " + (s.dialer ? "handshake with " : "peer at ") + s.remote + ": " + why));
        }
    }

    /** Ends a session; a dial or an established session failing takes its connection down with it. */
    void close(BootstrapSession s, ErrorCode code, String why) {
        if (s.state == CLOSED) {
            return;
        }
        boolean wasEstablished = s.established();
        closeChannel(s, why);
        UcxConnection c = s.conn;
        if (c == null) {
            return;
        }
        c.sessions.remove(s);
        if (s.dialer && !wasEstablished) {
            c.dialing--;
        }
        if (wasEstablished || c.peerInstance == 0 && c.dialing == 0 && c.sessions.isEmpty()) {
            lose(c, code, why);
        }
    }

    /** The control connection is gone: the connection fails (on the progress agent) and its sessions close. */
    void lose(UcxConnection c, ErrorCode code, String why) {
        if (c.controlLost) {
            return;
        }
        c.controlLost = true;
        closeSessions(c);
        UcxFailure f = UcxFailure.of(code, why);
        progress.submitAlways(new UcxCommand() {
            @Override
            public void run() {
                matcher.failConnection(c, f);
            }

            @Override
            public void abort(UcxFailure closing) {
                // The manager closes: the connection fails with it.
            }
        });
    }

    /** Closes every session of a connection, telling the peer (BYE) on established ones. */
    void closeSessions(UcxConnection c) {
        c.controlLost = true;
        Object[] queued;
        while ((queued = c.controlBacklog.poll()) != null) {
            ((Runnable) queued[2]).run();
        }
        onControlLost.accept(c);
        for (BootstrapSession s : new ArrayList<>(c.sessions)) {
            if (s.established()) {
                sendFrame(s, BYE, empty());
            }
            closeChannel(s, "connection closed");
        }
        c.sessions.clear();
        for (BootstrapSession s : new ArrayList<>(sessions)) {
            if (s.conn == c && s.state != CLOSED) {
                closeChannel(s, "connection closed");
            }
        }
    }

    private void closeChannel(BootstrapSession s, String why) {
        if (s.state == CLOSED) {
            return;
        }
        if (!s.out.isEmpty()) {
            try {
                for (ByteBuffer b : s.out) {
                    if (s.channel.write(b) == 0) {
                        break; // best effort: a last BYE or REFUSE
                    }
                }
            } catch (IOException ignored) {
                // The peer is gone.
            }
        }
        s.state = CLOSED;
        s.closeReason = why;
        sessions.remove(s);
        if (s.key != null) {
            s.key.cancel();
        }
        quietClose(s.channel);
    }

    private static void quietClose(SocketChannel ch) {
        try {
            ch.close();
        } catch (IOException ignored) {
            // Nothing to do.
        }
    }

    private static String remoteOf(SocketChannel ch) {
        try {
            return String.valueOf(ch.getRemoteAddress());
        } catch (IOException e) {
            return "?";
        }
    }

    /** @return sessions currently open (for tests) */
    int openSessions() {
        return sessions.size();
    }

    /** @return the sessions of the current thread's view, for the RMA protocol */
    List<BootstrapSession> sessionsOf(UcxConnection c) {
        return c.sessions;
    }
}
