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
    private static final long[] NO_HASHES = new long[0];
    private static final java.lang.invoke.VarHandle SUBMITTED;

    static {
        try {
            SUBMITTED = java.lang.invoke.MethodHandles.lookup().findVarHandle(TransferRequest.class, "submitted",
                    int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final long requestId;
    private final int promptLength;
    private final int[] blockIds;
    private final ContextPhaseParams params;
    private final long[] blockHashes;
    private final int reusedBlocks;
    /** The key of the prompt's last block (LoRA task id, extra keys, ...); set before submission. */
    private volatile long[] lastBlockKey = NO_HASHES;
    /** Generation side: tokens of block {@code reusedBlocks} already held (partial reuse); 0 = none. */
    private volatile int partialReuseTokens;
    /**
     * Layer-wise: layers of this rank known ready (context) or arrived (generation), made on the first mark (a
     * request moved whole never has one); guarded by {@code layers}.
     */
    private java.util.BitSet layerBits;
    private int layerPrefix;
    /** Context side: run once when {@link #layerPrefix} reaches {@link #layerListenCount} or the request ends. */
    private Runnable layerListener;
    private int layerListenCount;
    private volatile boolean layerWise;
    private final CompletableFuture<Void> done = new CompletableFuture<>();
    /** 1 once handed to a transceiver ({@link #SUBMITTED}). */
    private volatile int submitted;
    private final Handle handle = new Handle();
    /** The monitor of the layer marks: the request's own private handle (no lock object per request). */
    private final Object layers = handle;
    private volatile RequestState state;
    private volatile KvTransferException error;
    private volatile long kvCacheSize;
    private volatile int messageCount;
    private volatile CopyLedger copyLedger = CopyLedger.NONE;
    private volatile boolean pushed;
    private volatile long startEpochNanos;
    private volatile long endEpochNanos;
    /** Set by a context status check with {@code markComplete}. */
    private volatile boolean markedComplete;
    /** Set by the generation status check's bandwidth all-gather (timing on); -1 nanos = not yet. */
    private volatile long instanceBytes;
    private volatile long instanceNanos = -1;

    private TransferRequest(long requestId, int promptLength, int[] blockIds, ContextPhaseParams params,
                            RequestState initial, long[] blockHashes, int reusedBlocks) {
        if (promptLength < 1) {
            throw new IllegalArgumentException("promptLength = " + promptLength + ": must be >= 1");
        }
        Objects.requireNonNull(blockHashes, "blockHashes");
        if (reusedBlocks < 0 || reusedBlocks > blockHashes.length && params != null) {
            throw new IllegalArgumentException("reusedBlocks = " + reusedBlocks + " with " + blockHashes.length
                    + " hashes: each reused block needs its hash");
        }
        this.requestId = requestId;
        this.promptLength = promptLength;
        this.blockIds = Objects.requireNonNull(blockIds, "blockIds").clone();
        this.params = params;
        this.state = initial;
        this.blockHashes = blockHashes.length == 0 ? NO_HASHES : blockHashes.clone();
        this.reusedBlocks = reusedBlocks;
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
        return context(requestId, promptLength, blockIds, NO_HASHES);
    }

    /**
     * A context-side request whose engine knows its prompt blocks' hashes (its prefix-cache keys, one per block
     * of the whole prompt, in order): a generation side that already holds a prefix names the blocks it reuses by
     * these hashes, and a disagreement is refused naming the first differing block.
     *
     * @param requestId    the context request id
     * @param promptLength prompt length in tokens
     * @param blockIds     this rank's blocks of the request, in order
     * @param blockHashes  the hash of every block of the prompt (global block order), or empty
     * @return the request, in state {@link RequestState#CONTEXT_TRANS_IN_PROGRESS}
     */
    public static TransferRequest context(long requestId, int promptLength, int[] blockIds, long[] blockHashes) {
        return new TransferRequest(requestId, promptLength, blockIds, null, RequestState.CONTEXT_TRANS_IN_PROGRESS,
                blockHashes, 0);
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
        return generation(params, promptLength, blockIds, 0, NO_HASHES);
    }

    /**
     * A generation-side request whose first {@code reusedBlocks} blocks (global, of the whole prompt) this
     * instance already holds (a prefix-cache hit): only the rest is moved, the reused blocks are not written.
     *
     * @param params       what the context instance handed out
     * @param promptLength prompt length in tokens (as on the context side)
     * @param blockIds     this rank's blocks of the request, in order, reused ones included
     * @param reusedBlocks leading global blocks already held
     * @param reusedHashes the hash of each reused block (prefix-cache keys, as the context side computes them)
     * @return the request, in state {@link RequestState#GENERATION_TRANS_IN_PROGRESS}
     */
    public static TransferRequest generation(ContextPhaseParams params, int promptLength, int[] blockIds,
                                             int reusedBlocks, long[] reusedHashes) {
        Objects.requireNonNull(params, "params");
        Objects.requireNonNull(reusedHashes, "reusedHashes");
        if (reusedHashes.length != reusedBlocks) {
            throw new IllegalArgumentException(reusedHashes.length + " hashes for " + reusedBlocks
                    + " reused blocks: each reused block needs its hash");
        }
        return new TransferRequest(params.requestId(), promptLength, blockIds, params,
                RequestState.GENERATION_TRANS_IN_PROGRESS, reusedHashes, reusedBlocks);
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
        // One stage per request, made on first use (it cannot be completed from outside, so sharing it is safe).
        CompletionStage<TransferRequest> c = completion;
        if (c == null) {
            c = done.thenApply(v -> this).minimalCompletionStage();
            completion = c;
        }
        return c;
    }

    private volatile CompletionStage<TransferRequest> completion;

    /** @return whether the request reached a terminal state */
    public boolean isDone() {
        return done.isDone();
    }

    private static Instant toInstant(long epochNanos) {
        return Instant.ofEpochSecond(0, epochNanos);
    }

    /**
     * Layer-wise, context side: local layer {@code localLayer} of this rank's blocks is computed (call it after
     * each layer's forward pass, TensorRT-LLM's / Mooncake's {@code save_kv_layer}); the transfer moves it at
     * once. Layers may be marked in any order; they are moved in order.
     *
     * @param localLayer the rank-local layer index
     * @throws IllegalArgumentException when the index is negative
     */
    public void layerReady(int localLayer) {
        dev.kvtransfer.core.transfer.PushTrace.at("eng", requestId(), "mark", localLayer);
        markLayer(localLayer);
    }

    /**
     * Layer-wise, generation side: waits until this rank's local layer {@code localLayer} has arrived (vLLM's
     * {@code wait_for_layer_load}), or the request ended.
     *
     * @param localLayer the rank-local layer index
     * @param timeout    how long to wait
     * @return true when the layer arrived; false when the wait timed out
     * @throws dev.kvtransfer.api.KvTransferException the request's error when it failed before the layer arrived
     */
    public boolean awaitLayer(int localLayer, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        synchronized (layers) {
            while (!layerMarked(localLayer)) {
                if (state.isTerminal()) {
                    if (error != null) {
                        throw error;
                    }
                    return state == RequestState.GENERATION_TRANS_COMPLETE || state == RequestState.CONTEXT_COMPLETE;
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                try {
                    java.util.concurrent.TimeUnit.NANOSECONDS.timedWait(layers, left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
            return true;
        }
    }

    /**
     * @return messages (descriptors) this rank's transfer used: payload messages moved (pull), or write entries
     *         (push), once the request ended
     */
    public int messageCount() {
        return messageCount;
    }

    /**
     * @return this rank's copy ledger of the transfer (staging copies, transport passes, checksum passes), once the
     *         request completed; {@link CopyLedger#NONE} before, or when it failed
     */
    public CopyLedger copyLedger() {
        return copyLedger;
    }

    /**
     * @return once the request ended: whether the context side wrote one-sided into the generation pool (push);
     *         false for a pulled (sent and received) transfer, also when push was asked but a side could not push
     */
    public boolean wasPushed() {
        return pushed;
    }

    /** @return whether the context side sends this request layer by layer */
    public boolean isLayerWise() {
        return layerWise;
    }

    private void markLayer(int localLayer) {
        if (localLayer < 0) {
            throw new IllegalArgumentException("localLayer = " + localLayer + ": must be >= 0");
        }
        Runnable listener;
        synchronized (layers) {
            if (layerBits == null) {
                layerBits = new java.util.BitSet();
            }
            layerBits.set(localLayer);
            while (layerBits.get(layerPrefix)) {
                layerPrefix++;
            }
            layers.notifyAll();
            if (layerListener == null || layerPrefix < layerListenCount) {
                return;
            }
            listener = layerListener;
            layerListener = null;
        }
        listener.run();
    }

    /** @return whether {@code localLayer} was marked; under {@code layers} */
    private boolean layerMarked(int localLayer) {
        return layerBits != null && layerBits.get(localLayer);
    }

    /** Wakes per-layer waiters and runs a waiting layer listener (the request ended). */
    private void wakeLayerWaiters() {
        Runnable listener;
        synchronized (layers) {
            layers.notifyAll();
            listener = layerListener;
            layerListener = null;
        }
        if (listener != null) {
            listener.run();
        }
    }

    /** @return leading global blocks the generation side already held (0 on the context side) */
    public int reusedBlocks() {
        return reusedBlocks;
    }

    /**
     * Sets the key of the prompt's last block, as the engine's prefix cache computes it (TensorRT-LLM's
     * {@code BlockKey}: LoRA task id, extra keys such as multimodal hashes, cache salt). Context side: the key the
     * request's KV was computed under; generation side: the key this instance expects, sent with its request info.
     * The context side refuses a requester whose key differs ({@code UNSUPPORTED_LAYOUT}, naming the request and
     * both keys) before a byte moves: the same tokens under another adapter are other KV. Call it before the request
     * is submitted; an empty key (the default) matches only an empty key.
     *
     * @param key the key (copied)
     * @return this request
     * @throws IllegalStateException when the request was already submitted
     */
    public TransferRequest withLastBlockKey(long[] key) {
        Objects.requireNonNull(key, "key");
        requireNotSubmitted("lastBlockKey");
        lastBlockKey = key.length == 0 ? NO_HASHES : key.clone();
        return this;
    }

    /** @return a copy of the key of the prompt's last block (empty unless set) */
    public long[] lastBlockKey() {
        return lastBlockKey.clone();
    }

    /**
     * Generation side, partial block reuse (TensorRT-LLM's {@code enablePartialReuse}): the prefix-cache hit goes
     * {@code tokens} tokens into block {@link #reusedBlocks()}, which this instance holds as a private copy. That
     * block is still received whole (kvtransfer moves whole blocks, never from an offset inside one) and overwrites
     * those tokens. Served only when both instances' cache states declare {@code partialReuse}; otherwise refused
     * naming both sides' values. Call it before the request is submitted.
     *
     * @param tokens leading tokens of the partly reused block already held, at least 1 and below the block size
     * @return this request
     * @throws IllegalStateException    on a context request, or when the request was already submitted
     * @throws IllegalArgumentException when {@code tokens < 1}
     */
    public TransferRequest withPartialReuse(int tokens) {
        if (params == null) {
            throw new IllegalStateException("partial reuse is the generation side's: request " + requestId
                    + " is a context request");
        }
        if (tokens < 1) {
            throw new IllegalArgumentException("tokens = " + tokens + ": must be >= 1");
        }
        requireNotSubmitted("partial reuse");
        partialReuseTokens = tokens;
        return this;
    }

    /** @return generation side: tokens of block {@link #reusedBlocks()} already held (partial reuse); 0 = none */
    public int partialReuseTokens() {
        return partialReuseTokens;
    }

    private void requireNotSubmitted(String what) {
        if (submitted != 0) {
            throw new IllegalStateException("request " + requestId + " was submitted: set its " + what + " before");
        }
    }

    /**
     * @return whether a context status check called with {@code markComplete} reported the request completed:
     *         every rank of the context group finished it, and this rank's blocks of it were released
     *         (TensorRT-LLM's {@code markComplete}, which moves the request to {@code DISAGG_CONTEXT_COMPLETE})
     */
    public boolean isMarkedComplete() {
        return markedComplete;
    }

    void markComplete() {
        markedComplete = true;
    }

    /**
     * Generation side, with a timing directory configured (TensorRT-LLM's {@code updateKVCacheTransferBW}): the
     * bytes every rank of the generation group received for the request, summed by the status check that reported
     * it; 0 before that or without timing.
     *
     * @return the instance's bytes of the request
     */
    public long instanceKvCacheSize() {
        return instanceBytes;
    }

    /**
     * @return generation side, as {@link #instanceKvCacheSize}: from the earliest start to the latest end over the
     *         group's ranks (upstream's {@code gen_side_transfer_time}); empty before that or without timing
     */
    public Optional<Duration> instanceTransferDuration() {
        long n = instanceNanos;
        return n < 0 ? Optional.empty() : Optional.of(Duration.ofNanos(n));
    }

    void instanceTotals(long bytes, long nanos) {
        instanceBytes = bytes;
        instanceNanos = nanos;
    }

    /** @return start and end in epoch nanoseconds (0 when unknown), for the bandwidth all-gather */
    long startNanos() {
        return startEpochNanos;
    }

    long endNanos() {
        return endEpochNanos;
    }

    /** Marks the request as handed to a transceiver; a request is transferred once. */
    boolean markSubmitted() {
        return SUBMITTED.compareAndSet(this, 0, 1);
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
        public long[] blockHashes() {
            return blockHashes;
        }

        @Override
        public long[] lastBlockKey() {
            return lastBlockKey;
        }

        @Override
        public int partialReuseTokens() {
            return partialReuseTokens;
        }

        @Override
        public boolean layerWise() {
            return layerWise;
        }

        @Override
        public void recordMessages(int n, boolean wasPushed) {
            messageCount = n;
            pushed = wasPushed;
        }

        @Override
        public void recordLedger(CopyLedger ledger) {
            copyLedger = java.util.Objects.requireNonNull(ledger, "ledger");
        }

        @Override
        public void markLayerWise() {
            layerWise = true;
        }

        @Override
        public boolean awaitLayersReady(int count, long deadlineNanos) {
            synchronized (layers) {
                while (layerPrefix < count) {
                    if (state.isTerminal()) {
                        return false;
                    }
                    long left = deadlineNanos - System.nanoTime();
                    if (left <= 0) {
                        return false;
                    }
                    try {
                        java.util.concurrent.TimeUnit.NANOSECONDS.timedWait(layers, Math.min(left, 50_000_000L));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return false;
                    }
                }
                return true;
            }
        }

        @Override
        public int layersReady() {
            synchronized (layers) {
                return layerPrefix;
            }
        }

        @Override
        public boolean whenLayersReady(int count, Runnable action) {
            Objects.requireNonNull(action, "action");
            synchronized (layers) {
                if (layerPrefix >= count || state.isTerminal()) {
                    return true;
                }
                layerListener = action;
                layerListenCount = count;
                return false;
            }
        }

        @Override
        public void layerArrived(int localLayer) {
            markLayer(localLayer);
        }

        @Override
        public int reusedBlocks() {
            return reusedBlocks;
        }

        @Override
        public long startedEpochNanos(long otherwise) {
            long s = startEpochNanos;
            return s == 0 ? otherwise : s;
        }

        @Override
        public void started(long epochNanos) {
            startEpochNanos = epochNanos;
        }

        @Override
        public boolean succeed(long bytes, long epochNanos) {
            return succeed(bytes, epochNanos, null);
        }

        @Override
        public boolean succeed(long bytes, long epochNanos, Runnable beforeNotify) {
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
            if (beforeNotify != null) {
                beforeNotify.run();
            }
            done.complete(null);
            wakeLayerWaiters();
            return true;
        }

        @Override
        public boolean fail(KvTransferException e) {
            return fail(e, null);
        }

        @Override
        public boolean fail(KvTransferException e, Runnable beforeNotify) {
            Objects.requireNonNull(e, "error");
            synchronized (this) {
                if (state.isTerminal()) {
                    return false;
                }
                error = e;
                endEpochNanos = EpochClock.nowNanos();
                state = e.code() == ErrorCode.CANCELLED ? RequestState.CANCELLED : RequestState.TRANS_ERROR;
            }
            if (beforeNotify != null) {
                beforeNotify.run();
            }
            done.complete(null);
            wakeLayerWaiters();
            return true;
        }

        @Override
        public CompletableFuture<Void> done() {
            return done;
        }
    }

}
