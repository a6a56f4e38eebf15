package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import org.openucx.jucx.UcxUtils;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpRequest;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * The connection to one peer manager, identified by the peer's listen address. One object per peer address
 * whichever side dialed: messages the peer sends reach it by the sender id ({@link #inId}) this manager gave
 * the peer, and it sends on one endpoint ({@link #sendEp}) with the id the peer gave this manager
 * ({@link #outId}), so order per (connection, tag) holds.
 *
 * <p>Every field below the identity fields belongs to the manager's progress agent.
 */
final class UcxConnection implements Connection {
    final UcxConnectionManager manager;
    final String peer;
    /** The id this manager gave the peer: bits 32..62 of every tag the peer sends here. */
    final int inId;

    /** Why this connection is dead; set once, on the progress thread. */
    volatile UcxFailure failure;

    // ---- progress thread only ----
    /** The id the peer gave this manager; 0 until its hello or ack arrived. */
    int outId;
    /** The peer manager's UCX client id (random per manager); 0 until known. */
    long peerClientId;
    /** The endpoint all sends go on (the dialed one, or the accepted one when the peer dialed first). */
    UcpEndpoint sendEp;
    /** Every endpoint to the peer (dialed and accepted), closed together. */
    final List<UcpEndpoint> endpoints = new ArrayList<>(2);
    /** Sends that arrived before the handshake finished, posted in order once it has. */
    final ArrayDeque<UcxOp> waitingSends = new ArrayDeque<>();
    /** Posted operations, to fail when the peer is lost. */
    final Set<UcxOp> pending = Collections.newSetFromMap(new IdentityHashMap<>());
    /** The receive of the accepting side's ack while dialing. */
    UcpRequest ackRecv;
    boolean ackRecvDone;
    final ByteBuffer helloOut = ByteBuffer.allocateDirect(SockaddrHandshake.HELLO_BYTES)
            .order(ByteOrder.LITTLE_ENDIAN);
    final ByteBuffer ackOut = ByteBuffer.allocateDirect(SockaddrHandshake.ACK_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    final ByteBuffer ackIn = ByteBuffer.allocateDirect(SockaddrHandshake.ACK_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    final long helloOutAddress = UcxUtils.getAddress(helloOut);
    final long ackOutAddress = UcxUtils.getAddress(ackOut);
    final long ackInAddress = UcxUtils.getAddress(ackIn);

    UcxConnection(UcxConnectionManager manager, String peer, int inId) {
        this.manager = manager;
        this.peer = peer;
        this.inId = inId;
    }

    /** @return whether sends can be posted now (progress thread) */
    boolean ready() {
        return sendEp != null && outId != 0 && failure == null;
    }

    @Override
    public Duration defaultTimeout() {
        return manager.defaultTimeout();
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.send(this, tag, buffer, offset, length, timeout);
    }


    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.recv(this, tag, buffer, offset, length, timeout);
    }

    @Override
    public String peer() {
        return peer;
    }

    @Override
    public String toString() {
        return "UcxConnection{" + manager.localAddress() + " -> " + peer + ", in=" + inId
                + (failure != null ? ", failed: " + failure.message() : "") + "}";
    }
}
