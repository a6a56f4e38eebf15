package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.core.timing.TransferTiming;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** One request on the generation side: its handle, deadline, timing, and what a push granted and received. */
final class GenerationJob {
    final TransferHandle handle;
    final long deadlineNanos;
    final TransferTiming timing;
    /** Push: what this rank registered for the request (revoked when it ends, success or not). */
    final List<dev.kvtransfer.api.transport.RegisteredRegion> registrations = new ArrayList<>();
    /** Push: region id to the registered memory, for checking what was written. */
    final Map<Long, MemoryBuffer> granted = new java.util.HashMap<>();
    boolean push;
    boolean layered;
    /** The ready signals' receives were posted: {@link PostedReady} carries the request on, not its thread. */
    boolean posted;
    /** A pull with {@code FLAG_PULL_GO}: the peer positions its receive tells go when it starts; else null. */
    int[] goPeers;
    /** Push: bytes the context ranks wrote into this rank's blocks (checked). */
    long pushedBytes;
    /** Push: write entries the context ranks reported. */
    int pushedEntries;
    /** Push: bytes each context rank (in target order) wrote. */
    long[] pushedPeerBytes;

    GenerationJob(TransferHandle handle, long startNanos, long deadlineNanos) {
        this.handle = handle;
        this.deadlineNanos = deadlineNanos;
        this.timing = new TransferTiming(handle.requestId(), startNanos);
    }
}
