package dev.kvtransfer.aeron;

import io.aeron.Image;
import io.aeron.logbuffer.ControlledFragmentHandler;

/**
 * One inbound stream (an Aeron image: one peer's publication to us), owned by the agent: its handshake state,
 * the peer it is bound to, and the message whose fragments are being assembled. An image that does not complete
 * its handshake in time, or fails it, is refused: it is no longer read at all (Aeron's flow control then stalls
 * only its sender) and its state is dropped when the image goes away.
 */
final class ImageState {
    /** Waiting for the first message, which must be a HELLO. */
    static final int AWAIT_HELLO = 0;
    /** HELLO accepted; the stream belongs to {@link #peer}. */
    static final int BOUND = 1;
    /** HELLO claims a peer whose current stream is still alive: held unread until that stream ends or time runs out. */
    static final int PENDING = 2;
    /** Refused: never read again. */
    static final int REFUSED = 3;

    // What the fragments after a message's first one go to.
    static final int ASSEMBLE_NONE = 0;
    /** Straight into a posted receive's memory ({@link #op}). */
    static final int ASSEMBLE_OP = 1;
    /** Into an early message's staging ({@link #arrival}). */
    static final int ASSEMBLE_STAGED = 2;
    /** Nowhere: the rest of a message that is dropped. */
    static final int ASSEMBLE_DISCARD = 3;

    final Image image;
    final boolean ipc;
    final long createdNs;
    final ControlledFragmentHandler handler;
    int state = AWAIT_HELLO;
    /** Counted among the streams awaiting their HELLO (agent's bounds); cleared once, when it leaves that. */
    boolean awaiting = true;
    Peer peer;
    /** The claim of a PENDING image: its address and incarnation. */
    String pendingAddress;
    long pendingIncarnation;
    boolean pendingAuthenticated;

    int assemble = ASSEMBLE_NONE;
    Op op;
    Peer.Arrival arrival;
    int arrivalTag;
    /** Where the next fragment goes: offset in the message. */
    long position;
    /** Length of the message being assembled. */
    long messageLength;

    ImageState(Image image, boolean ipc, long createdNs, Dispatcher dispatcher) {
        this.image = image;
        this.ipc = ipc;
        this.createdNs = createdNs;
        this.handler = (buffer, offset, length, header) -> dispatcher.onFragment(this, buffer, offset, length, header);
    }

    String describe() {
        return (ipc ? "ipc" : "udp") + " session " + image.sessionId() + " from " + image.sourceIdentity();
    }
}
