package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Moving one message's bytes for a manager: the envelope send (inline payload copied, or header plus the payload
 * chunks straight from the caller's memory) and the payload receive of a large message once its envelope was
 * matched ({@code MPI_Improbe} of the exact source and payload tag, then {@code MPI_Imrecv} of exactly the probed
 * size into the caller's memory: a message is never received truncated, because Open MPI 4.1's vader single-copy
 * (CMA) path writes the whole message even into a shorter buffer).
 *
 * <p>Every wait polls inside C for at most {@value #SPIN_NANOS} ns per JNI call, then checks the deadline, close
 * and the thread's interrupt flag, then spins {@value #SPIN_POLLS} rounds and parks 1 µs … 200 µs. On timeout,
 * close or interrupt the waiting thread {@code MPI_Cancel}s its own request and waits at most 200 ms for it; a
 * request MPI cannot cancel (Open MPI cannot cancel a matched or in-flight transfer) is released to finish in
 * the background.
 */
final class MpiDataPath {
    private static final long SPIN_NANOS = 20_000;
    private static final int SPIN_POLLS = 50;
    private static final long MAX_PARK_NANOS = 200_000;
    private static final long CANCEL_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

    /** One envelope header per thread, in native memory (a direct buffer owned by the thread). */
    private static final ThreadLocal<Header> HEADER = ThreadLocal.withInitial(Header::new);
    private static final ThreadLocal<long[]> PROBE = ThreadLocal.withInitial(() -> new long[3]);

    private final MpiConnectionManager manager;
    private final MpiRuntime runtime;
    private final MpiSettings settings;

    MpiDataPath(MpiConnectionManager manager, MpiRuntime runtime, MpiSettings settings) {
        this.manager = manager;
        this.runtime = runtime;
        this.settings = settings;
    }

    private static final class Header {
        final ByteBuffer view = ByteBuffer.allocateDirect(Envelope.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        final long address = MpiNative.addressOf(view);
    }

    /**
     * Sends a message of at most the eager limit from {@code srcEndpoint} of this process without blocking (the
     * progress agent answers one-sided requests with it, also for an endpoint that has closed).
     */
    static void sendInline(MpiRuntime runtime, MpiLinks.Link link, int rank, int srcEndpoint, int dstEndpoint, int tag,
                           long address, int length) {
        Header h = HEADER.get();
        Envelope.write(h.view, true, srcEndpoint, dstEndpoint, tag, 0, length, 0);
        long request = MpiNative.isendEnvelope(h.address, Envelope.HEADER_BYTES, address, length, rank, dstEndpoint,
                link.envelopeComm());
        if (MpiNative.test(request, 0) == 0) {
            runtime.deferEager(request, null);
        }
    }

    /** Sends one message (the caller checked the range and entered the manager). */
    void send(MpiConnection conn, int tag, long address, long length, long deadline) {
        Header h = HEADER.get();
        int envComm = conn.link().envelopeComm();
        if (length <= settings.eagerBytes()) {
            Envelope.write(h.view, true, manager.endpointId(), conn.endpoint(), tag, 0, length, 0);
            long request = MpiNative.isendEnvelope(h.address, Envelope.HEADER_BYTES, address, (int) length, conn.rank(),
                    conn.endpoint(), envComm);
            if (MpiNative.test(request, 0) == 0) {
                runtime.deferEager(request, manager); // the agent completes it; the caller's memory is free now
            }
            return;
        }
        int chunk = settings.chunkBytes();
        long chunks = (length - 1) / chunk + 1;
        if (chunks > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(describe("send", conn, tag, length) + ": more than 2^31 chunks of "
                    + MpiSettings.MAX_MESSAGE_BYTES + " = " + chunk);
        }
        int payloadTag = runtime.nextPayloadTag();
        Envelope.write(h.view, false, manager.endpointId(), conn.endpoint(), tag, payloadTag, length, chunk);
        long envelope = MpiNative.isendEnvelope(h.address, Envelope.HEADER_BYTES, 0, 0, conn.rank(), conn.endpoint(),
                envComm);
        if (MpiNative.test(envelope, 0) == 0) {
            runtime.deferEager(envelope, manager);
        }
        long[] requests = new long[(int) chunks];
        int posted = 0;
        try {
            for (; posted < chunks; posted++) {
                long pos = (long) posted * chunk;
                int count = (int) Math.min(chunk, length - pos);
                requests[posted] = MpiNative.isend(address + pos, count, conn.rank(), payloadTag,
                        conn.link().dataComm(), false);
            }
            for (int i = 0; i < requests.length; i++) {
                long request = requests[i];
                requests[i] = 0;
                await(request, deadline, "send", conn.rank(), conn.endpoint(), tag, length);
            }
        } finally {
            for (int i = 0; i < posted; i++) {
                if (requests[i] != 0) {
                    MpiNative.cancel(requests[i], CANCEL_WAIT_NANOS);
                }
            }
        }
    }

    /**
     * Receives the payload of a large message whose envelope was matched: {@code ceil(length / chunk)} MPI
     * messages from {@code rank} on {@code payloadTag}. When the sent length differs from the expected one the
     * payload is drained (the tag stays in step) and {@code MALFORMED} thrown.
     */
    void receivePayload(MpiEndpoint.Waiter w, int tag, long address, long length, long deadline, String op) {
        long sent = w.sentLength;
        int chunk = w.chunk;
        int dataComm = runtime.links().get(w.fromLink).dataComm();
        long[] probe = PROBE.get();
        long pos = 0;
        while (pos < sent) {
            long expected = Math.min(chunk, sent - pos);
            long message = probe(w.fromRank, w.payloadTag, dataComm, probe, deadline, op, w.fromEndpoint, tag, length);
            long count = probe[1];
            if (count != expected || sent != length) {
                discard(message, count, address, length, deadline, op, w.fromRank, w.fromEndpoint, tag);
                pos += count;
                if (count != expected) {
                    throw new TransportException(ErrorCode.MALFORMED, describe(op, w.fromRank, w.fromEndpoint, tag,
                            length) + ": payload chunk of " + count + " bytes at offset " + (pos - count)
                            + ", the envelope announced " + expected);
                }
                continue;
            }
            long request = MpiNative.imrecv(address + pos, (int) count, message);
            await(request, deadline, op, w.fromRank, w.fromEndpoint, tag, length);
            pos += count;
        }
        if (sent != length) {
            throw mismatch(op, w, tag, length);
        }
    }

    TransportException mismatch(String op, MpiEndpoint.Waiter w, int tag, long length) {
        return new TransportException(ErrorCode.MALFORMED, describe(op, w.fromRank, w.fromEndpoint, tag, length)
                + ": length mismatch: expected " + length + " bytes, the peer sent " + w.sentLength);
    }

    private long probe(int source, int mpiTag, int comm, long[] out, long deadline, String op, int endpoint, int tag,
                       long length) {
        int idle = 0;
        for (;;) {
            long message = MpiNative.improbe(source, mpiTag, comm, out, SPIN_NANOS);
            if (message != 0) {
                return message;
            }
            checkWake(op, source, endpoint, tag, length, deadline, 0);
            idle = backoff(idle);
        }
    }

    /**
     * Receives a wrong-sized chunk into scratch memory so the tag stays in step: the caller's range when it fits
     * (its content is undefined after MALFORMED anyway), else a temporary native block.
     */
    private void discard(long message, long count, long address, long length, long deadline, String op, int peer,
                         int endpoint, int tag) {
        if (count <= length) {
            await(MpiNative.imrecv(address, (int) count, message), deadline, op, peer, endpoint, tag, length);
            return;
        }
        long scratch = MpiNative.allocate(count);
        boolean received = false;
        try {
            await(MpiNative.imrecv(scratch, (int) count, message), deadline, op, peer, endpoint, tag, length);
            received = true;
        } finally {
            if (received) {
                MpiNative.release(scratch); // else MPI may still write it: leaked on purpose
            }
        }
    }

    /** Waits for one request; on deadline, close or interrupt it is cancelled and the call fails. */
    void await(long request, long deadline, String op, int peer, int endpoint, int tag, long length) {
        int idle = 0;
        for (;;) {
            int done = MpiNative.test(request, SPIN_NANOS);
            if (done == 1) {
                return;
            }
            if (done == 2) {
                // Cannot happen: every receive is posted with the probed size. Reported rather than ignored.
                throw new TransportException(ErrorCode.MALFORMED, describe(op, peer, endpoint, tag, length)
                        + ": MPI reported a truncated message");
            }
            checkWake(op, peer, endpoint, tag, length, deadline, request);
            idle = backoff(idle);
        }
    }

    private void checkWake(String op, int peer, int endpoint, int tag, long length, long deadline, long request) {
        if (manager.closing() || runtime.finalizing()) {
            cancel(request);
            throw new TransportClosedException(describe(op, peer, endpoint, tag, length) + " interrupted: " + manager
                    + " closed");
        }
        if (Thread.currentThread().isInterrupted()) {
            cancel(request);
            throw new TransportException(ErrorCode.NETWORK, describe(op, peer, endpoint, tag, length)
                    + " interrupted (the thread's interrupt flag is kept)");
        }
        if (System.nanoTime() - deadline >= 0) {
            cancel(request);
            throw new TransportException(ErrorCode.TIMEOUT, describe(op, peer, endpoint, tag, length) + " timed out");
        }
    }

    private static void cancel(long request) {
        if (request != 0) {
            MpiNative.cancel(request, CANCEL_WAIT_NANOS);
        }
    }

    /** Spin first (latency), then park for growing intervals (oversubscribed ranks need the core). */
    private static int backoff(int idle) {
        if (idle >= SPIN_POLLS) {
            LockSupport.parkNanos(Math.min(MAX_PARK_NANOS, 1_000L << Math.min(idle - SPIN_POLLS, 10)));
        } else {
            Thread.onSpinWait();
        }
        return idle + 1;
    }

    String describe(String op, MpiConnection conn, int tag, long length) {
        return describe(op, conn.rank(), conn.endpoint(), tag, length);
    }

    String describe(String op, int peer, int endpoint, int tag, long length) {
        return "mpi " + op + " (" + manager.localAddress() + (peer >= 0 ? " <-> " + peer + "/" + endpoint
                : " <- any") + ", tag " + tag + ", " + length + " bytes)";
    }
}
