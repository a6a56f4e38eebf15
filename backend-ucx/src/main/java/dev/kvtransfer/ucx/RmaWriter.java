package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import org.openucx.jucx.ucp.UcpRemoteKey;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The writer side of native one-sided writes ({@code Connection.write}): a descriptor is used only after its
 * owner validated it over the control connection (cached per connection and region, keyed by the whole
 * descriptor, so a forged variant of a validated one is validated — and refused — on its own); the batch then
 * goes as implicit {@code ucp_put}s plus one {@code ucp_ep_flush}, whose completion is remote completion. A
 * revocation from the owner marks the region revoked at once (later writes: {@code CANCELLED}) and is
 * acknowledged when no batch into it is in flight any more.
 */
final class RmaWriter {
    private final UcxConnectionManager manager;
    private final AtomicLong nextRequest = new AtomicLong(1);
    private final Map<Long, Pending> pending = new ConcurrentHashMap<>();
    private BootstrapAgent bootstrap;

    RmaWriter(UcxConnectionManager manager) {
        this.manager = manager;
    }

    void wire(BootstrapAgent bootstrap) {
        this.bootstrap = bootstrap;
    }

    /** A validation in flight. */
    private record Pending(UcxConnection conn, CompletableFuture<UcxFailure> answer) {
    }

    /** What a connection's writer knows about one of its peer's regions. Guarded by the connection's writer map. */
    static final class Target {
        final RegionDescriptor descriptor;
        final long address;
        final byte[] rkey;
        /** Unpacked on the progress agent at first use. */
        UcpRemoteKey unpacked;
        int inFlight;
        boolean revoked;
        boolean ackOwed;

        Target(RegionDescriptor d) {
            this.descriptor = d;
            this.address = d.address();
            byte[] k = d.key();
            this.rkey = java.util.Arrays.copyOfRange(k, RmaRegions.CAPABILITY_BYTES, k.length);
        }
    }

    /**
     * Writes a batch (caller thread).
     *
     * @param c       the connection to the owner
     * @param batch   the entries
     * @param timeout deadline of the call
     */
    void write(UcxConnection c, WriteBatch batch, Duration timeout) {
        long deadline = System.nanoTime() + saturated(timeout);
        for (int i = 0; i < batch.size(); i++) {
            RegionDescriptor d = batch.target(i);
            if (!d.owner().equals(c.peer)) {
                throw new IllegalArgumentException("entry " + i + " targets region #" + d.regionId() + " of "
                        + d.owner() + " but the connection goes to " + c.peer);
            }
            if (batch.source(i).kind() == MemoryKind.DEVICE && !manager.supportsDeviceMemory()) {
                throw new UnsupportedOperationException("UCX transport: DEVICE memory is not supported here");
            }
        }
        if (batch.size() == 0) {
            if (!manager.isRunning()) {
                manager.checkOpen("write to " + c.peer);
            }
            return;
        }
        Target[] targets = manager.targetScratch(batch.size());
        int n = batch.size();
        Map<Long, Target> byRegion = c.writerTargets;
        for (int i = 0; i < batch.size(); i++) {
            RegionDescriptor d = batch.target(i);
            Target t;
            synchronized (byRegion) {
                t = byRegion.get(d.regionId());
            }
            if (t == null || !t.descriptor.equals(d)) {
                t = validate(c, d, deadline);
            }
            targets[i] = t;
        }
        // Acquire every target at once: a revocation either comes before (CANCELLED) or waits for this batch.
        synchronized (byRegion) {
            for (int i = 0; i < n; i++) {
                if (targets[i].revoked) {
                    throw new TransportException(ErrorCode.CANCELLED, "write to " + c.peer + ": region #"
                            + targets[i].descriptor.regionId() + " was deregistered by its owner");
                }
            }
            for (int i = 0; i < n; i++) {
                targets[i].inFlight++;
            }
        }
        try {
            manager.puts(c, batch, targets, deadline);
        } finally {
            synchronized (byRegion) {
                for (int i = 0; i < n; i++) {
                    Target t = targets[i];
                    t.inFlight--;
                    if (t.inFlight == 0 && t.ackOwed) {
                        t.ackOwed = false;
                        ack(c, t);
                    }
                }
            }
        }
    }

    /** Asks the owner whether a descriptor is live; caches the answer when it is. */
    private Target validate(UcxConnection c, RegionDescriptor d, long deadline) {
        if (d.key().length <= RmaRegions.CAPABILITY_BYTES) {
            throw new TransportException(ErrorCode.UNAUTHORIZED, "write to " + c.peer + ": region #" + d.regionId()
                    + " has a " + d.key().length + "-byte key; this transport's keys are longer"
                    + (d.key().length == dev.kvtransfer.transport.support.EmulatedOneSided.KEY_BYTES
                    ? " (an emulated region's: the owner runs ucx.oneSided=emulated or auto resolved to emulated,"
                    + " this writer native; give both sides the same ucx.oneSided)" : ""));
        }
        long request = nextRequest.getAndIncrement();
        CompletableFuture<UcxFailure> answer = new CompletableFuture<>();
        pending.put(request, new Pending(c, answer));
        byte[] key = d.key();
        ByteBuffer body = BootstrapFrames.buffer(40 + key.length);
        body.putLong(request).putLong(d.regionId()).putLong(d.address()).putLong(d.length())
                .putShort((short) key.length).put(key).flip();
        bootstrap.execute(() -> bootstrap.sendControlWhenEstablished(c, BootstrapFrames.VALIDATE, body,
                () -> answer.complete(UcxFailure.of(ErrorCode.PEER_LOST, "no control connection to " + c.peer))));
        UcxFailure refusal;
        try {
            refusal = answer.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            throw new TransportException(ErrorCode.TIMEOUT, "write to " + c.peer + ": the owner did not confirm region"
                    + " #" + d.regionId() + " in time");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "write to " + c.peer + ": interrupted");
        } catch (ExecutionException e) {
            throw new TransportException(ErrorCode.INTERNAL, "write to " + c.peer + ": " + e.getCause(), e);
        } finally {
            pending.remove(request);
        }
        if (refusal != null) {
            throw refusal.toException("write to " + c.peer + " (region #" + d.regionId() + ")");
        }
        Target t = new Target(d);
        synchronized (c.writerTargets) {
            Target old = c.writerTargets.get(d.regionId());
            if (old != null && old.descriptor.equals(d)) {
                return old;
            }
            c.writerTargets.put(d.regionId(), t);
        }
        return t;
    }

    // ---------------------------------------------------------------- control frames (bootstrap agent)

    void onValidated(UcxConnection from, BootstrapFrames.Reader r) throws BootstrapFrames.Violation {
        long request = r.i64("request");
        int status = r.u8("status");
        String reason = r.string("reason", BootstrapFrames.MAX_REASON);
        r.end();
        Pending p = pending.get(request);
        if (p == null || p.conn != from) {
            return; // answered after the writer gave up, or not ours
        }
        if (status == 0) {
            p.answer.complete(null);
        } else {
            ErrorCode code = status - 1 < ErrorCode.values().length ? ErrorCode.values()[status - 1]
                    : ErrorCode.UNAUTHORIZED;
            p.answer.complete(UcxFailure.of(code, "refused by the owner: " + UcxErrors.quote(reason)));
        }
    }

    void onRevoke(UcxConnection from, BootstrapFrames.Reader r) throws BootstrapFrames.Violation {
        long id = r.i64("region");
        r.end();
        Target t;
        synchronized (from.writerTargets) {
            t = from.writerTargets.get(id);
            if (t != null) {
                t.revoked = true;
                if (t.inFlight > 0) {
                    t.ackOwed = true; // the last batch in flight acknowledges
                    return;
                }
            }
        }
        if (t != null) {
            ack(from, t);
        } else {
            ackId(from, id);
        }
    }

    private void ack(UcxConnection c, Target t) {
        synchronized (c.writerTargets) {
            c.writerTargets.remove(t.descriptor.regionId(), t);
        }
        manager.releaseRemoteKey(t);
        ackId(c, t.descriptor.regionId());
    }

    private void ackId(UcxConnection c, long id) {
        ByteBuffer b = BootstrapFrames.buffer(8);
        b.putLong(id).flip();
        bootstrap.execute(() -> bootstrap.sendControl(c, BootstrapFrames.REVOKED, b));
    }

    /** The connection failed (progress agent): validations waiting on it end with its failure. */
    void onConnectionLost(UcxConnection c, UcxFailure f) {
        for (Map.Entry<Long, Pending> e : pending.entrySet()) {
            if (e.getValue().conn == c) {
                e.getValue().answer.complete(f);
            }
        }
    }

    private static long saturated(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE / 4;
        }
    }
}
