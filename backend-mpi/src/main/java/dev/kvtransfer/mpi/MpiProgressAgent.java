package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.IdleStrategy;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The process's progress agent (one per process while any endpoint is open, under an Agrona {@code AgentRunner}):
 * each duty cycle takes the envelopes that arrived on the envelope communicator of each link ({@code MPI_Improbe}
 * of any source and tag, so nothing waits in MPI's own unexpected queue), checks each header, and hands it to its
 * endpoint ({@link MpiEndpoint#deliver}); then it completes the eager sends still in flight and takes the links
 * that processes of other MPI worlds formed ({@link MpiLinks}). An envelope for a
 * closed endpoint, a malformed one, or one beyond an endpoint's queue bound is dropped, counted and reported
 * (rate-limited) to the error handlers. Envelopes are received into one reused native scratch block: a
 * delivery to a waiting receive allocates nothing.
 */
final class MpiProgressAgent implements Agent {
    /** Envelopes taken per duty cycle before the cycle yields to the eager-send reaper. */
    private static final int BURST = 64;
    /** How long the agent waits for the body of an envelope it matched (the sender is alive and in MPI). */
    private static final long RECEIVE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(10);

    private final MpiRuntime runtime;
    private final long[] probe = new long[3];
    private long scratch;
    private long reply;
    private ByteBuffer replyView;
    private int scratchBytes;
    private ByteBuffer view;

    MpiProgressAgent(MpiRuntime runtime) {
        this.runtime = runtime;
        grow(Envelope.HEADER_BYTES + (int) MpiSettings.DEFAULT_EAGER_BYTES);
    }

    private void grow(int bytes) {
        if (scratch != 0) {
            MpiNative.release(scratch);
        }
        scratch = MpiNative.allocate(bytes);
        scratchBytes = bytes;
        view = MpiNative.wrap(scratch, bytes).order(ByteOrder.LITTLE_ENDIAN);
    }

    @Override
    public int doWork() {
        int work = 0;
        if (!runtime.enter()) {
            return 0;
        }
        try {
            MpiLinks links = runtime.links();
            for (MpiLinks.Link link : links.all()) {
                for (int i = 0; i < BURST; i++) {
                    long message = MpiNative.improbe(-1, -1, link.envelopeComm(), probe, 0);
                    if (message == 0) {
                        break;
                    }
                    work++;
                    receive(link.index(), message, (int) probe[0], (int) probe[1], (int) probe[2]);
                }
            }
            work += runtime.reapEagerSends();
            work += links.takeAccepted();
        } finally {
            runtime.exit();
        }
        return work;
    }

    private void receive(int link, long message, int source, int count, int mpiTag) {
        if (count > scratchBytes) {
            if (count <= Envelope.HEADER_BYTES + MpiSettings.MAX_EAGER_BYTES) {
                grow(count);
            } else {
                // Still received whole (MPI cannot drop a matched message, and a shorter buffer would be overrun).
                long junk = MpiNative.allocate(count);
                try {
                    if (MpiNative.recvMatched(junk, count, message, RECEIVE_WAIT_NANOS) == 1) {
                        runtime.counters().malformed.increment();
                        runtime.report("malformed", new TransportException(ErrorCode.MALFORMED, "mpi: dropped a "
                                + count + "-byte envelope from rank " + source + " for endpoint " + mpiTag
                                + " (largest accepted: " + (Envelope.HEADER_BYTES + MpiSettings.MAX_EAGER_BYTES)
                                + ")"));
                        MpiNative.release(junk);
                    }
                } catch (RuntimeException e) {
                    MpiNative.release(junk);
                    throw e;
                }
                return;
            }
        }
        if (MpiNative.recvMatched(scratch, count, message, RECEIVE_WAIT_NANOS) != 1) {
            // MPI still owns the scratch block: abandon it (never reuse memory MPI may write into).
            scratch = 0;
            grow(scratchBytes);
            runtime.report("stalled", new TransportException(ErrorCode.NETWORK, "mpi: an envelope of " + count
                    + " bytes from rank " + source + " did not arrive within "
                    + TimeUnit.NANOSECONDS.toMillis(RECEIVE_WAIT_NANOS) + " ms; dropped"));
            return;
        }
        String bad = Envelope.check(view, count, mpiTag, runtime.tagUpperBound());
        if (bad != null) {
            runtime.counters().malformed.increment();
            runtime.report("malformed", new TransportException(ErrorCode.MALFORMED, "mpi: dropped an envelope from"
                    + " rank " + source + " for endpoint " + mpiTag + ": " + bad));
            return;
        }
        runtime.counters().envelopes.increment();
        MpiEndpoint endpoint = runtime.endpoint(mpiTag);
        if (view.getInt(Envelope.AT_TAG) == Tags.RMA_REQUEST_TAG && oneSided(endpoint, link, source, count, mpiTag)) {
            return;
        }
        if (endpoint == null) {
            runtime.counters().dropped.increment();
            if (mpiTag >= 0 && mpiTag < runtime.issuedEndpoints()) {
                // Issued and since closed: a late message of an orderly shutdown (a peer's last status or
                // BYE crossing this endpoint's close). Counted, as a delivery to a closing endpoint is; it
                // belongs to no open manager, so no other manager's handler hears of it.
                return;
            }
            runtime.report("late", new TransportException(ErrorCode.NETWORK, "mpi: dropped a message for endpoint "
                    + mpiTag + " of rank " + runtime.worldRank() + " from " + source + "/"
                    + view.getInt(Envelope.AT_SOURCE_ENDPOINT) + ", tag " + view.getInt(Envelope.AT_TAG)
                    + ": no endpoint with that id was ever opened in this process"));
            return;
        }
        MpiEndpoint.Delivery d = endpoint.deliver(view, link, source, scratch + Envelope.HEADER_BYTES);
        if (d == MpiEndpoint.Delivery.CLOSED) {
            runtime.counters().dropped.increment();
        } else if (d == MpiEndpoint.Delivery.OVER_BOUND) {
            runtime.counters().dropped.increment();
            runtime.reportTo(mpiTag, "bound", new TransportException(ErrorCode.NETWORK, "mpi endpoint "
                    + runtime.worldRank() + "/" + mpiTag + ": dropped a " + view.getLong(Envelope.AT_LENGTH)
                    + "-byte message from " + source + "/" + view.getInt(Envelope.AT_SOURCE_ENDPOINT) + ", tag "
                    + view.getInt(Envelope.AT_TAG) + ": queue bound reached (" + MpiSettings.MAX_QUEUED_BYTES
                    + " / " + MpiSettings.MAX_QUEUED_MESSAGES + ")"));
        }
    }

    /**
     * A one-sided request or done message: served here when the endpoint writes natively; refused
     * {@code CANCELLED} when the endpoint has closed (so the writer does not wait for its deadline).
     *
     * @return true when handled
     */
    private boolean oneSided(MpiEndpoint endpoint, int link, int source, int count, int mpiTag) {
        if ((view.getInt(Envelope.AT_FLAGS) & Envelope.FLAG_INLINE) == 0) {
            return false;
        }
        int srcEndpoint = view.getInt(Envelope.AT_SOURCE_ENDPOINT);
        long payload = scratch + Envelope.HEADER_BYTES;
        long length = count - Envelope.HEADER_BYTES;
        if (endpoint != null) {
            MpiOneSided os = endpoint.owner.nativeOneSided();
            if (os == null) {
                return false;
            }
            os.onMessage(link, source, srcEndpoint, payload, length);
            return true;
        }
        if (mpiTag >= runtime.issuedEndpoints() || length < MpiOneSided.HEADER_BYTES) {
            return false;
        }
        ByteBuffer m = MpiNative.wrap(payload, length).order(ByteOrder.LITTLE_ENDIAN);
        if (m.getInt(0) != MpiOneSided.MAGIC || m.getInt(4) != MpiOneSided.REQUEST) {
            return false;
        }
        if (reply == 0) {
            reply = MpiNative.allocate(MpiOneSided.REPLY_BYTES);
            replyView = MpiNative.wrap(reply, MpiOneSided.REPLY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        }
        MpiOneSided.writeReply(replyView, m.getLong(8), MpiOneSided.REFUSED + ErrorCode.CANCELLED.ordinal(), 0,
                "endpoint " + runtime.worldRank() + "/" + mpiTag + " is closed: its regions were deregistered");
        MpiDataPath.sendInline(runtime, runtime.links().get(link), source, mpiTag, srcEndpoint, Tags.RMA_REPLY_TAG,
                reply, MpiOneSided.REPLY_BYTES);
        runtime.counters().rmaRefused.increment();
        return true;
    }

    @Override
    public void onClose() {
        if (reply != 0) {
            MpiNative.release(reply);
            reply = 0;
        }
        if (scratch != 0) {
            MpiNative.release(scratch);
            scratch = 0;
        }
    }

    @Override
    public String roleName() {
        return "kvtransfer-mpi-progress";
    }

    /**
     * Spins, then yields, then parks: for at most {@value #BUSY_PARK_NANOS} ns while some receive waits (its
     * envelope is what we are polling for), for up to {@value #IDLE_PARK_NANOS} ns otherwise; a receive that
     * starts waiting unparks the agent at once. While a link to another MPI world may be forming (this process
     * connects, or listens: {@link MpiLinks#forming()}) it never parks, only yields: Open MPI's connect/accept
     * handshake advances only while some thread keeps calling into MPI's progress engine.
     */
    static final class Idle implements IdleStrategy {
        static final long BUSY_PARK_NANOS = 20_000;
        static final long IDLE_PARK_NANOS = 1_000_000;
        private static final int SPINS = 50;
        private static final int YIELDS = 20;
        private final MpiRuntime runtime;
        private int idle;
        private long park = 1_000;

        Idle(MpiRuntime runtime) {
            this.runtime = runtime;
        }

        @Override
        public void idle(int workCount) {
            if (workCount > 0) {
                reset();
            } else {
                idle();
            }
        }

        @Override
        public void idle() {
            idle++;
            if (idle <= SPINS) {
                Thread.onSpinWait();
            } else if (idle <= SPINS + YIELDS) {
                Thread.yield();
            } else {
                if (runtime.links().forming()) {
                    // Open MPI 4.1 forms a link (connect/accept) only while some thread keeps calling
                    // opal_progress: with the agent parked, 7 of 8 runs of rule 23 at -np 2 took 14-32 s.
                    Thread.yield();
                    return;
                }
                long max = runtime.waitingReceives() > 0 ? BUSY_PARK_NANOS : IDLE_PARK_NANOS;
                park = Math.min(max, park * 2);
                LockSupport.parkNanos(park);
            }
        }

        @Override
        public void reset() {
            idle = 0;
            park = 1_000;
        }

        @Override
        public String alias() {
            return "mpi-backoff";
        }
    }
}
