package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.UcxUtils;
import org.openucx.jucx.ucp.UcpConnectionRequest;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucs.UcsConstants;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;

/**
 * Handshake over UCX's own connection manager: a dialing side creates an endpoint to the peer's
 * {@code UcpListener} (error mode PEER, its client id sent) and sends a hello on the control tag (its listen
 * address, client id, and the sender id it gave the peer); the accepting side pairs the hello with the endpoint
 * it created for that client id, gives the dialer a sender id and answers on that endpoint. Agent thread only.
 */
final class SockaddrHandshake {
    static final int MAX_ADDRESS_BYTES = 1024;
    static final int HELLO_BYTES = 4 + 8 + 4 + 4 + MAX_ADDRESS_BYTES;
    static final int ACK_BYTES = 4 + 8 + 4;
    private static final int HELLO_MAGIC = 0x4855564B; // "KVUH" little-endian
    private static final int ACK_MAGIC = 0x4155564B;   // "KVUA"

    private final UcxConnectionManager manager;
    private final UcxErrors errors;
    private final UcpWorker worker;
    private final long clientId;
    private final int hostMemType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST;
    private final Map<Long, ArrayDeque<AcceptedEndpoint>> unclaimed = new HashMap<>();
    private final ByteBuffer helloIn = ByteBuffer.allocateDirect(HELLO_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    private final long helloInAddress = UcxUtils.getAddress(helloIn);
    private final HelloCallback helloCallback = new HelloCallback();
    private TagMatcher matcher;
    private EndpointCloser endpoints;
    private UcpRequest helloRecv;
    private boolean helloRecvDone = true;

    SockaddrHandshake(UcxConnectionManager manager, UcxErrors errors, UcpWorker worker, long clientId) {
        this.manager = manager;
        this.errors = errors;
        this.worker = worker;
        this.clientId = clientId;
    }

    void wire(TagMatcher matcher, EndpointCloser endpoints) {
        this.matcher = matcher;
        this.endpoints = endpoints;
        matcher.hook(this::onConnectionFailed);
    }

    /** Posts the always-present hello receive; call before the agent starts. */
    void start() {
        postHelloRecv();
    }

    private void report(String message, Throwable cause) {
        errors.report("handshake", new TransportException(ErrorCode.NETWORK, "UCX manager '" + manager.name()
                + "': " + message, cause));
    }

    /** Dials a connection's peer (agent thread). */
    void dial(UcxConnection c) {
        if (c.failure != null || c.sendEp != null) {
            return; // the peer dialed first: its accepted endpoint is already ours to send on
        }
        InetSocketAddress to;
        try {
            to = UcxAddresses.parse(c.peer);
        } catch (IllegalArgumentException e) {
            matcher.failConnection(c, UcxFailure.of(ErrorCode.NETWORK, "bad UCX address "
                    + UcxErrors.quote(c.peer) + ": " + e.getMessage()));
            return;
        }
        try {
            c.ackRecvDone = false;
            c.ackRecv = worker.recvTaggedNonBlocking(c.ackInAddress, ACK_BYTES, UcxTags.ack(c.inId),
                    UcxTags.EXACT_MASK, new AckCallback(c), hostMemType);
            UcpEndpoint ep = worker.newEndpoint(new UcpEndpointParams().setSocketAddress(to)
                    .setPeerErrorHandlingMode().sendClientId().setName("kv-" + manager.name() + "->" + c.peer)
                    .setErrorHandler((e, status, msg) -> onEndpointError(c, status, msg)));
            c.endpoints.add(ep);
            c.sendEp = ep;
            byte[] addr = manager.localAddress().getBytes(StandardCharsets.UTF_8);
            ByteBuffer h = c.helloOut;
            h.clear();
            h.putInt(HELLO_MAGIC).putLong(clientId).putInt(c.inId).putInt(addr.length).put(addr);
            ep.sendTaggedNonBlocking(c.helloOutAddress, h.position(), UcxTags.HELLO, new ControlSendCallback(c),
                    hostMemType);
        } catch (UcxException e) {
            matcher.failConnection(c, new UcxFailure(ErrorCode.PEER_LOST, "cannot connect to " + c.peer + ": "
                    + e.getMessage(), false, e));
        }
    }

    /** Listener callback: a peer dialed; accept now, bind to its connection when its hello arrives. */
    void onConnectionRequest(UcpConnectionRequest req) {
        if (!manager.isRunning()) {
            try {
                req.reject();
            } catch (RuntimeException e) {
                report("reject failed", e);
            }
            return;
        }
        AcceptedEndpoint a = new AcceptedEndpoint(req.getClientId());
        try {
            a.ep = worker.newEndpoint(new UcpEndpointParams().setConnectionRequest(req).setPeerErrorHandlingMode()
                    .setName("kv-" + manager.name() + "<-" + req.getClientAddress())
                    .setErrorHandler((e, status, msg) -> onAcceptedEndpointError(a, e, status, msg)));
        } catch (UcxException e) {
            report("cannot accept " + req.getClientAddress() + ": " + e.getMessage(), e);
            return;
        }
        unclaimed.computeIfAbsent(a.clientId, k -> new ArrayDeque<>()).add(a);
    }

    private void postHelloRecv() {
        helloIn.clear();
        helloRecvDone = false;
        helloRecv = worker.recvTaggedNonBlocking(helloInAddress, HELLO_BYTES, UcxTags.HELLO, UcxTags.EXACT_MASK,
                helloCallback, hostMemType);
    }

    private void onHello() {
        ByteBuffer h = helloIn;
        h.clear();
        int magic = h.getInt();
        long peerClient = h.getLong();
        int idForUs = h.getInt();
        int len = h.getInt();
        String peerAddress = null;
        if (magic == HELLO_MAGIC && len > 0 && len <= MAX_ADDRESS_BYTES && idForUs > 0) {
            byte[] a = new byte[len];
            h.get(a);
            peerAddress = new String(a, StandardCharsets.UTF_8);
        }
        if (manager.isRunning()) {
            postHelloRecv();
        }
        if (peerAddress == null) {
            report("malformed hello ignored", null);
            return;
        }
        ArrayDeque<AcceptedEndpoint> q = unclaimed.get(peerClient);
        AcceptedEndpoint a = q == null ? null : q.poll();
        if (q != null && q.isEmpty()) {
            unclaimed.remove(peerClient);
        }
        if (a == null) {
            report("hello from " + UcxErrors.quote(peerAddress) + " without an accepted endpoint of client id "
                    + Long.toHexString(peerClient) + "; ignored", null);
            return;
        }
        UcxConnection c = manager.existing(peerAddress);
        if (c != null && c.peerClientId != 0 && c.peerClientId != peerClient) {
            matcher.failConnection(c, UcxFailure.of(ErrorCode.PEER_LOST, "peer " + peerAddress + " restarted"));
            c = null;
        } else if (c != null && c.outId != 0 && c.outId != idForUs) {
            // The peer dropped its connection to us (e.g. a send deadline force-closed it) and dialed afresh:
            // ours is stale (its endpoints are dead on the far side), start over with the new one.
            matcher.failConnection(c, UcxFailure.of(ErrorCode.PEER_LOST, "peer " + peerAddress + " reconnected;"
                    + " its previous connection broke"));
            c = null;
        }
        if (c == null) {
            c = manager.connectionFor(peerAddress);
        }
        a.conn = c;
        c.endpoints.add(a.ep);
        if (c.failure != null) {
            endpoints.closeEndpoints(c);
            return;
        }
        c.peerClientId = peerClient;
        if (c.sendEp == null) {
            c.sendEp = a.ep; // replies go back on the endpoint the peer dialed
        }
        ByteBuffer ack = c.ackOut;
        ack.clear();
        ack.putInt(ACK_MAGIC).putLong(clientId).putInt(c.inId);
        try {
            a.ep.sendTaggedNonBlocking(c.ackOutAddress, ACK_BYTES, UcxTags.ack(idForUs), new ControlSendCallback(c),
                    hostMemType);
        } catch (UcxException e) {
            matcher.failConnection(c, new UcxFailure(ErrorCode.PEER_LOST, "cannot answer " + peerAddress + ": "
                    + e.getMessage(), false, e));
            return;
        }
        learnOutId(c, idForUs);
    }

    private void onAck(UcxConnection c) {
        ByteBuffer a = c.ackIn;
        a.clear();
        int magic = a.getInt();
        long peerClient = a.getLong();
        int id = a.getInt();
        if (magic != ACK_MAGIC || id <= 0) {
            matcher.failConnection(c, UcxFailure.of(ErrorCode.MALFORMED, "malformed handshake answer from "
                    + c.peer));
            return;
        }
        c.peerClientId = peerClient;
        learnOutId(c, id);
    }

    private void learnOutId(UcxConnection c, int id) {
        if (c.failure != null) {
            return;
        }
        if (c.outId == 0) {
            c.outId = id;
        } else if (c.outId != id) {
            report(c.peer + " gave sender id " + id + " after " + c.outId + "; keeping the first", null);
        }
        if (c.ready()) {
            manager.everConnected(c);
            matcher.releaseWaitingSends(c);
        }
    }

    private void onEndpointError(UcxConnection c, int status, String msg) {
        matcher.failConnection(c, UcxFailure.of(ErrorCode.PEER_LOST, "peer " + c.peer + " lost (UCX: " + msg
                + ", status " + status + ")"));
    }

    private void onAcceptedEndpointError(AcceptedEndpoint a, UcpEndpoint ep, int status, String msg) {
        if (a.conn != null) {
            onEndpointError(a.conn, status, msg);
            return;
        }
        ArrayDeque<AcceptedEndpoint> q = unclaimed.get(a.clientId);
        if (q != null) {
            q.remove(a);
            if (q.isEmpty()) {
                unclaimed.remove(a.clientId);
            }
        }
        endpoints.forceClose(ep);
    }

    private void onConnectionFailed(UcxConnection c) {
        if (c.ackRecv != null && !c.ackRecvDone) {
            c.ackRecvDone = true;
            try {
                worker.cancelRequest(c.ackRecv);
            } catch (RuntimeException e) {
                report("cancel of handshake receive failed", e);
            }
        }
    }

    /** Shutdown: cancels the hello receive and closes endpoints never claimed by a hello. */
    void shutdown() {
        if (!helloRecvDone && helloRecv != null) {
            helloRecvDone = true;
            worker.cancelRequest(helloRecv);
        }
        for (ArrayDeque<AcceptedEndpoint> q : unclaimed.values()) {
            for (AcceptedEndpoint a : q) {
                endpoints.forceClose(a.ep);
            }
        }
        unclaimed.clear();
    }

    /** An endpoint this manager accepted, waiting for the hello that says which peer it is. */
    private static final class AcceptedEndpoint {
        final long clientId;
        UcpEndpoint ep;
        UcxConnection conn;

        AcceptedEndpoint(long clientId) {
            this.clientId = clientId;
        }
    }

    /** Completion of the always-posted hello receive. */
    private final class HelloCallback extends UcxCallback {
        @Override
        public void onSuccess(UcpRequest r) {
            helloRecvDone = true;
            try {
                onHello();
            } catch (RuntimeException e) {
                report("hello handling failed", e);
            }
        }

        @Override
        public void onError(int status, String message) {
            helloRecvDone = true;
            if (manager.isRunning()) {
                report("hello receive failed: " + message, null);
                postHelloRecv();
            }
        }
    }

    /** Completion of the dialing side's receive of the handshake answer. */
    private final class AckCallback extends UcxCallback {
        private final UcxConnection conn;

        AckCallback(UcxConnection conn) {
            this.conn = conn;
        }

        @Override
        public void onSuccess(UcpRequest r) {
            conn.ackRecvDone = true;
            try {
                onAck(conn);
            } catch (RuntimeException e) {
                report("handshake answer failed", e);
            }
        }

        @Override
        public void onError(int status, String message) {
            conn.ackRecvDone = true;
            // Cancelled when the connection failed or the manager closed; the failure is already recorded.
        }
    }

    /** Completion of a hello or ack send; a failure shows up in the endpoint's error handler too. */
    private final class ControlSendCallback extends UcxCallback {
        private final UcxConnection conn;

        ControlSendCallback(UcxConnection conn) {
            this.conn = conn;
        }

        @Override
        public void onError(int status, String message) {
            if (manager.isRunning() && conn.failure == null) {
                matcher.failConnection(conn, UcxFailure.of(ErrorCode.PEER_LOST, "handshake with " + conn.peer
                        + " failed (UCX: " + message + ")"));
            }
        }
    }
}
