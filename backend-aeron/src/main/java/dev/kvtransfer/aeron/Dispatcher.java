package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.logbuffer.ControlledFragmentHandler.Action;
import io.aeron.logbuffer.FrameDescriptor;
import io.aeron.logbuffer.Header;
import org.agrona.DirectBuffer;

/**
 * Reads every fragment of every inbound stream (agent thread; Aeron's {@code DataPacketDispatcher} is the model):
 * a stream's first message must be a HELLO ({@link Handshake}), which binds the stream to one peer for good;
 * everything after goes to the {@link Matcher} as that peer's. Frames are checked before anything is sized from
 * them: our header must be there, lengths must agree with the frame, and nothing is allocated in proportion to a
 * length a peer wrote (eager messages are bounded by the eager limit and the early bounds, rendezvous data lands
 * only in a posted receive's memory and only within its length).
 */
final class Dispatcher {
    private final AeronConnectionManager m;
    private final TransportAgent agent;
    private final Matcher matcher;

    Dispatcher(AeronConnectionManager m, TransportAgent agent, Matcher matcher) {
        this.m = m;
        this.agent = agent;
        this.matcher = matcher;
    }

    Action onFragment(ImageState img, DirectBuffer buffer, int offset, int length, Header header) {
        if (img.state == ImageState.REFUSED) {
            return Action.ABORT; // not read any more (normally it is not polled at all)
        }
        byte flags = header.flags();
        boolean begin = (flags & FrameDescriptor.BEGIN_FRAG_FLAG) != 0;
        boolean end = (flags & FrameDescriptor.END_FRAG_FLAG) != 0;
        if (img.state == ImageState.AWAIT_HELLO) {
            return onFirst(img, buffer, offset, length, begin, end);
        }
        if (img.state != ImageState.BOUND) {
            return Action.ABORT; // PENDING: held until its claim can be decided
        }
        Peer p = img.peer;
        if (!begin) {
            matcher.onContinuation(img, p, buffer, offset, length, end);
            return Action.CONTINUE;
        }
        if (img.assemble != ImageState.ASSEMBLE_NONE) {
            // A new message began before the previous one ended: Aeron never does that; a peer's bug.
            matcher.abandonAssembly(img, p);
        }
        if (length < Wire.HEADER_LENGTH) {
            agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": a " + length
                    + "-byte frame from " + p.address + " is shorter than our header; dropped"));
            if (!end) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
            }
            return Action.CONTINUE;
        }
        int type = Wire.type(buffer, offset);
        int tag = Wire.tag(buffer, offset);
        long seq = Wire.seq(buffer, offset);
        long value = Wire.value(buffer, offset);
        int bodyOffset = offset + Wire.HEADER_LENGTH;
        int bodyLength = length - Wire.HEADER_LENGTH;
        switch (type) {
            case Wire.EAGER:
                return matcher.onEager(img, p, tag, value, buffer, bodyOffset, bodyLength, end);
            case Wire.DATA:
                matcher.onData(img, p, seq, value, buffer, bodyOffset, bodyLength, end);
                return Action.CONTINUE;
            default:
                break;
        }
        if (!end || bodyLength != 0) {
            agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": "
                    + Wire.typeName(type) + " from " + p.address + " carries " + bodyLength + " B"
                    + (end ? "" : " and spans frames") + "; dropped"));
            if (!end) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
            }
            return Action.CONTINUE;
        }
        switch (type) {
            case Wire.RTS:
                return matcher.onRts(p, tag, seq, value);
            case Wire.CTS:
            case Wire.REJECT:
                matcher.onClear(p, seq, type == Wire.CTS);
                break;
            case Wire.CANCEL:
                matcher.onCancel(p, tag, seq);
                break;
            default:
                agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": "
                        + Wire.typeName(type) + " from " + p.address + " is not a message of this transport;"
                        + " dropped"));
        }
        return Action.CONTINUE;
    }

    private Action onFirst(ImageState img, DirectBuffer buffer, int offset, int length, boolean begin, boolean end) {
        if (!begin || !end || length < Wire.HEADER_LENGTH || Wire.type(buffer, offset) != Wire.HELLO) {
            agent.refuse(img, "its first message is not a HELLO (" + length + " B"
                    + (begin && length >= Wire.HEADER_LENGTH ? ", " + Wire.typeName(Wire.type(buffer, offset)) : "")
                    + "): " + TransportAgent.MID_STREAM + " or is not this transport", false);
            return Action.ABORT;
        }
        long bodyLength = Wire.value(buffer, offset);
        if (bodyLength != length - Wire.HEADER_LENGTH) {
            agent.refuse(img, "HELLO frame of " + length + " B declares a body of " + bodyLength + " B", false);
            return Action.ABORT;
        }
        Handshake.Result r = m.handshake.verify(buffer, offset + Wire.HEADER_LENGTH, length - Wire.HEADER_LENGTH,
                m.localAddress());
        if (r.refusal != null) {
            agent.refuse(img, r.refusal, r.unauthorized);
            return Action.ABORT;
        }
        agent.bind(img, r.sender, r.incarnation, r.authenticated);
        return Action.CONTINUE;
    }
}
