package dev.kvtransfer.core;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.timing.EpochClock;
import dev.kvtransfer.core.transfer.TransferHandle;

import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The engine's handle of one request on one rank: which request (the <em>context</em> request id), how long
 * its prompt is, which blocks of this rank's KV pool hold (context) or will hold (generation) it, and, on the
 * generation side, the {@link ContextPhaseParams} the context instance handed out. The transceiver updates
 * {@link #state()}, the error, the byte count and the times; engines read them. Thread-safe.
 *
 * <p>{@link #state()} is this rank's local view; {@link CacheTransceiver#checkContextTransferStatus} and
 * {@link CacheTransceiver#checkGenTransferStatus} report when the whole status group agrees.
 */
public final class TransferRequest {
    private final long requestId;
    private final int promptLength;
    private final int[] blockIds;
    private final ContextPhaseParams params;
    private final CompletableFuture<Void> done = new CompletableFuture<>();
    private final AtomicBoolean submitted = new AtomicBoolean();
    private final Handle handle = new Handle();
    private volatile RequestState state;
    private volatile KvTransferException error;
    private volatile long kvCacheSize;
    private volatile long startEpochNanos;
    private volatile long endEpochNanos;

    private TransferRequest(long requestId, int promptLength, int[] blockIds, ContextPhaseParams params,
                            RequestState initial) {
        if (promptLength < 1) {
            throw new IllegalArgumentException("promptLength = " + promptLength + ": must be >= 1");
        }
        this.requestId = requestId;
        this.promptLength = promptLength;
        this.blockIds = Objects.requireNonNull(blockIds, "blockIds").clone();
        this.params = params;
        this.state = initial;
    }

    /**
     * A context-side request: its prefill is done and its blocks hold the cache to send.
     *
     * @param requestId    the context request id
     * @param promptLength prompt length in tokens
     * @param blockIds     this rank's blocks of the request, in order
     * @return the request, in state {@link RequestState#CONTEXT_TRANS_IN_PROGRESS}
     */
    public static TransferRequest context(long requestId, int promptLength, int[] blockIds) {
        return new TransferRequest(requestId, promptLength, blockIds, null, RequestState.CONTEXT_TRANS_IN_PROGRESS);
    }

    /**
     * A generation-side request: receive the cache the context instance described in {@code params}.
     *
     * @param params       what the context instance handed out (its request id and state)
     * @param promptLength prompt length in tokens (as on the context side)
     * @param blockIds     this rank's blocks allocated for the request, in order
     * @return the request, in state {@link RequestState#GENERATION_TRANS_IN_PROGRESS}
     */
    public static TransferRequest generation(ContextPhaseParams params, int promptLength, int[] blockIds) {
        Objects.requireNonNull(params, "params");
        return new TransferRequest(params.requestId(), promptLength, blockIds, params,
                RequestState.GENERATION_TRANS_IN_PROGRESS);
    }

    /** @return the context request id */
    public long requestId() {
        return requestId;
    }

    /** @return prompt length in tokens */
    public int promptLength() {
        return promptLength;
    }

    /** @return a copy of this rank's block ids */
    public int[] blockIds() {
        return blockIds.clone();
    }

    /** @return the context phase params (generation side only) */
    public Optional<ContextPhaseParams> contextPhaseParams() {
        return Optional.ofNullable(params);
    }

    /** @return whether this is a context-side request */
    public boolean isContext() {
        return params == null;
    }

    /** @return the current local state */
    public RequestState state() {
        return state;
    }

    /** @return why it failed or was cancelled, when it did */
    public Optional<KvTransferException> error() {
        return Optional.ofNullable(error);
    }

    /** @return bytes this rank sent (context) or received (generation) for the request; 0 until complete */
    public long kvCacheSize() {
        return kvCacheSize;
    }

    /**
     * When this rank's transfer started: context side, when a sender thread took the request (every
     * counterpart had asked); generation side, when its request infos were about to go out (upstream's
     * {@code kvCacheTransferStart}).
     *
     * @return the start, if it started
     */
    public Optional<Instant> transferStart() {
        long s = startEpochNanos;
        return s == 0 ? Optional.empty() : Optional.of(toInstant(s));
    }

    /** @return when the request ended, if it did */
    public Optional<Instant> transferEnd() {
        long e = endEpochNanos;
        return e == 0 ? Optional.empty() : Optional.of(toInstant(e));
    }

    /** @return end minus start, once both are known: the per-request transfer time */
    public Optional<Duration> transferDuration() {
        long s = startEpochNanos;
        long e = endEpochNanos;
        return s == 0 || e == 0 ? Optional.empty() : Optional.of(Duration.ofNanos(Math.max(0, e - s)));
    }

    /** @return the start in nanoseconds since the epoch, if known */
    public OptionalLong transferStartEpochNanos() {
        long s = startEpochNanos;
        return s == 0 ? OptionalLong.empty() : OptionalLong.of(s);
    }

    /** @return completes (normally, whatever the outcome) when the request reaches a terminal state */
    public CompletionStage<TransferRequest> completion() {
        return done.thenApply(v -> this).minimalCompletionStage();
    }

    /** @return whether the request reached a terminal state */
    public boolean isDone() {
        return done.isDone();
    }

    private static Instant toInstant(long epochNanos) {
        return Instant.ofEpochSecond(0, epochNanos);
    }

    /** Marks the request as handed to a transceiver; a request is transferred once. */
    boolean markSubmitted() {
        return submitted.compareAndSet(false, true);
    }

    /** @return the internal handle the sender and receiver drive */
    TransferHandle handle() {
        return handle;
    }

    @Override
    public String toString() {
        return "TransferRequest{" + requestId + " " + state + " prompt=" + promptLength + " blocks="
                + blockIds.length + (error != null ? " " + error.getMessage() : "") + "}";
    }

    private final class Handle implements TransferHandle {
        @Override
        public long requestId() {
            return requestId;
        }

        @Override
        public int promptLength() {
            return promptLength;
        }

        @Override
        public int[] blockIds() {
            return blockIds;
        }

        @Override
        public ContextPhaseParams contextPhaseParams() {
            return params;
        }

        @Override
        public void started(long epochNanos) {
            startEpochNanos = epochNanos;
        }

        @Override
        public boolean succeed(long bytes, long epochNanos) {
            synchronized (this) {
                if (state.isTerminal()) {
                    return false;
                }
                kvCacheSize = bytes;
                endEpochNanos = epochNanos;
                if (startEpochNanos == 0) {
                    startEpochNanos = epochNanos;
                }
                state = params == null ? RequestState.CONTEXT_COMPLETE : RequestState.GENERATION_TRANS_COMPLETE;
            }
            done.complete(null);
            return true;
        }

        @Override
        public boolean fail(KvTransferException e) {
            Objects.requireNonNull(e, "error");
            synchronized (this) {
                if (state.isTerminal()) {
                    return false;
                }
                error = e;
                endEpochNanos = EpochClock.nowNanos();
                state = e.code() == ErrorCode.CANCELLED ? RequestState.CANCELLED : RequestState.TRANS_ERROR;
            }
            done.complete(null);
            return true;
        }

        @Override
        public CompletableFuture<Void> done() {
            return done;
        }
    }

}
