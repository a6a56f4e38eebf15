package dev.kvtransfer.ucx;

import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.util.ArrayDeque;

/**
 * One TCP control connection of the bootstrap: its handshake state, a fixed-size read buffer (one frame of at
 * most {@link BootstrapFrames#MAX_FRAME} bytes always fits; nothing grows with what a peer claims), a bounded
 * write queue, the handshake transcript its MACs cover, and after the handshake its session key, sequence
 * numbers and liveness clocks. Bootstrap agent thread only.
 */
final class BootstrapSession {
    static final int CONNECTING = 0;
    static final int AWAIT_HELLO = 1;
    static final int AWAIT_WELCOME = 2;
    static final int AWAIT_CONFIRM = 3;
    static final int AWAIT_READY = 4;
    static final int ESTABLISHED = 5;
    static final int CLOSED = 6;
    /** Most bytes queued for a peer that does not read before the session is given up. */
    static final int MAX_QUEUED_BYTES = 1 << 20;

    final SocketChannel channel;
    final boolean dialer;
    final String remote;
    final long createdNanos;
    SelectionKey key;
    int state;
    /** The connection this session serves: from the start when dialing, after the confirm when accepting. */
    UcxConnection conn;
    long deadlineNanos;
    long lastHeardNanos;
    long lastSentNanos;
    final ByteBuffer in = BootstrapFrames.buffer(4 + BootstrapFrames.MAX_FRAME);
    final ArrayDeque<ByteBuffer> out = new ArrayDeque<>();
    int queuedBytes;

    // ---- handshake ----
    byte[] myNonce;
    /** Whole hello and welcome payloads (fields and MAC): what the later MACs cover. */
    ByteBuffer helloBytes;
    ByteBuffer welcomeBytes;
    BootstrapFrames.Hello hello;
    BootstrapFrames.Welcome welcome;
    /** Acceptor: the sender id it offered the dialer in its welcome. */
    int offeredSenderId;

    // ---- established ----
    byte[] sessionKey;
    long sendSeq;
    long recvSeq;
    String closeReason;

    BootstrapSession(SocketChannel channel, boolean dialer, String remote, long now) {
        this.channel = channel;
        this.dialer = dialer;
        this.remote = remote;
        this.createdNanos = now;
        this.lastHeardNanos = now;
        this.lastSentNanos = now;
        this.state = dialer ? CONNECTING : AWAIT_HELLO;
    }

    /** Direction byte of the frames this side sends (0 = dialer to acceptor). */
    int sendDirection() {
        return dialer ? 0 : 1;
    }

    int receiveDirection() {
        return dialer ? 1 : 0;
    }

    boolean established() {
        return state == ESTABLISHED;
    }

    @Override
    public String toString() {
        return "session(" + (dialer ? "to " : "from ") + remote + ", state " + state + ")";
    }
}
