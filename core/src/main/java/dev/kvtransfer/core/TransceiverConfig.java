package dev.kvtransfer.core;

import dev.kvtransfer.api.layout.BlockLayout;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * Settings of one {@link CacheTransceiver}. Immutable; built with {@link #builder()} or
 * {@link #fromProperties(Map)} and validated once in {@link Builder#build()}, which fails naming the offending
 * property and value. Every property name and default lives in this class (the {@code P_*} and
 * {@code DEFAULT_*} constants); {@link TransceiverConfigKeys} describes each one. The string form (parsing each
 * kind of value, key to setter and back) is {@link TransceiverProperties}; the checks of {@code build()} and the
 * deployment secret are {@link TransceiverConfigValidation}.
 */
public final class TransceiverConfig {
    /** Prefix of every property understood here. */
    public static final String PREFIX = "kvtransfer.";
    /** Transport provider name. */
    public static final String P_BACKEND = PREFIX + "backend";
    /** Formatter provider name; empty = chosen by the cache's attention type. */
    public static final String P_FORMATTER = PREFIX + "formatter";
    /** Bytes of one staging slot of the transfer buffer pool (used when maxTokensInBuffer is 0). */
    public static final String P_TRANSFER_BUFFER_BYTES = PREFIX + "transferBufferBytes";
    /** Tokens one staging slot holds (sizes the slot from the block layout); 0 = use transferBufferBytes. */
    public static final String P_MAX_TOKENS_IN_BUFFER = PREFIX + "maxTokensInBuffer";
    /** Sender threads on the context side, and send slots of the buffer pool. */
    public static final String P_SEND_CONCURRENCY = PREFIX + "sendConcurrency";
    /** How long the context responder waits for the info behind a header on an idle connection; 0 = never. */
    public static final String P_RESPONDER_INFO_WAIT_MICROS = PREFIX + "responderInfoWaitMicros";
    /** Receive slots of the buffer pool allocated up front (with dynamic buffers on, more are added as needed). */
    public static final String P_RECV_SLOTS = PREFIX + "recvSlots";
    /** Whether parts to/from different peers move concurrently. */
    public static final String P_PARALLEL_RECEIVE = PREFIX + "parallelReceive";
    /** Whether parts that do not fit a slot get dynamically allocated staging buffers. */
    public static final String P_ALLOW_DYNAMIC_BUFFERS = PREFIX + "allowDynamicBuffers";
    /** Largest payload message in bytes (the requester's value travels in RequestInfo); 0 = no chunking. */
    public static final String P_CHUNK_BYTES = PREFIX + "chunkBytes";
    /** Overall deadline of one request's transfer, in milliseconds, from the async call. */
    public static final String P_KV_TRANSFER_TIMEOUT_MS = PREFIX + "kvTransferTimeoutMs";
    /** Longest wait on one request's future per status check, in milliseconds. */
    public static final String P_SENDER_FUTURE_TIMEOUT_MS = PREFIX + "senderFutureTimeoutMs";
    /** Directory of the timing CSV files; empty = no timing output. */
    public static final String P_TIMING_DIR = PREFIX + "timingDir";
    /** Generation-side request threads per context instance. */
    public static final String P_REQUEST_THREADS_PER_PEER_INSTANCE = PREFIX + "requestThreadsPerPeerInstance";
    /** Most context-side requests (local or asked for) tracked at once before new ones are refused. */
    public static final String P_MAX_PENDING_REQUESTS = PREFIX + "maxPendingRequests";
    /** Directory of the transfer journal (one Chronicle Queue per rank); empty = no journal. */
    public static final String P_JOURNAL_DIR = PREFIX + "journalDir";
    /** Whether the journal records a CRC32C of every part's payload (per-byte work on the transfer threads). */
    public static final String P_JOURNAL_CHECKSUMS = PREFIX + "journalChecksums";

    /** Control-plane authentication: {@code required} (default) or {@code off}. */
    public static final String P_AUTH = PREFIX + "auth";
    /** File holding the deployment's shared secret (at least 16 bytes); unset = a per-JVM random secret. */
    public static final String P_AUTH_SECRET_FILE = PREFIX + "authSecretFile";
    /** Whether every part carries an end-to-end CRC32C that the receiver checks before it completes. */
    public static final String P_PART_CHECKSUMS = PREFIX + "partChecksums";
    /**
     * Whether a pull coalesces blocks consecutive on both sides into one message (default {@code true}); the
     * requester decides for both sides ({@code RequestInfo.FLAG_NO_COALESCE}). Push always coalesces.
     */
    public static final String P_COALESCE = PREFIX + "coalesce";
    /** Whether the generation side awaits ready signals with posted receives (docs/design/core-control-layer.md). */
    public static final String P_POSTED_READY = PREFIX + "postedReadySignals";
    /**
     * How long (µs) one idle thread of a request pool (the generation side's request threads, the context side's
     * info threads) spins for the next task before it parks, while its side is lightly loaded; 0 = parks at once;
     * -1 (the default) = the transport's choice ({@code ConnectionManager.preferredPoolSpinMicros}).
     */
    public static final String P_POOL_SPIN_MICROS = PREFIX + "poolSpinMicros";
    /** {@code pull} (default: the generation side asks, the context side sends) or {@code push}. */
    public static final String P_TRANSFER_MODE = PREFIX + "transferMode";
    /**
     * Smallest pull, in bytes of the whole model's KV for the blocks to move, that takes the local one-copy path
     * where every rank is local; a smaller one moves as messages. 0 = one copy whatever the size.
     */
    public static final String P_LOCAL_ONE_COPY_MIN_BYTES = PREFIX + "localOneCopyMinBytes";

    /** Default transport: Aeron needs nothing installed. */
    public static final String DEFAULT_BACKEND = "aeron";
    /** Default formatter: none named, chosen by attention type. */
    public static final String DEFAULT_FORMATTER = "";
    /** Default slot size: 64 MiB (TensorRT-LLM uses 512 MiB per slot; we keep tests and laptops happy). */
    public static final long DEFAULT_TRANSFER_BUFFER_BYTES = 64L << 20;
    /** Default: slot size from bytes, not tokens. */
    public static final int DEFAULT_MAX_TOKENS_IN_BUFFER = 0;
    /** Default sender threads / send slots. */
    public static final int DEFAULT_SEND_CONCURRENCY = 2;
    /** Responder wait for an idle connection's info: the transport's choice (its preferredResponderInfoWaitMicros). */
    public static final int RESPONDER_INFO_WAIT_TRANSPORT = -1;
    /** Default responder wait (µs): {@link #RESPONDER_INFO_WAIT_TRANSPORT}. */
    public static final int DEFAULT_RESPONDER_INFO_WAIT_MICROS = RESPONDER_INFO_WAIT_TRANSPORT;
    /** Default receive slots (TensorRT-LLM's TRTLLM_KVCACHE_RECV_BUFFER_COUNT). */
    public static final int DEFAULT_RECV_SLOTS = 2;
    /** Default: peers one after the other. */
    public static final boolean DEFAULT_PARALLEL_RECEIVE = false;
    /** Default: dynamic staging allowed. */
    public static final boolean DEFAULT_ALLOW_DYNAMIC_BUFFERS = true;
    /** Default largest payload message: 8 MiB. */
    public static final long DEFAULT_CHUNK_BYTES = 8L << 20;
    /** Default overall per-request deadline: 60 s (TensorRT-LLM's documented value). */
    public static final long DEFAULT_KV_TRANSFER_TIMEOUT_MS = 60_000;
    /** Default wait per future per status check. */
    public static final long DEFAULT_SENDER_FUTURE_TIMEOUT_MS = 1_000;
    /** Default: no timing output. */
    public static final String DEFAULT_TIMING_DIR = "";
    /** Default generation request threads per context instance. */
    public static final int DEFAULT_REQUEST_THREADS_PER_PEER_INSTANCE = 4;
    /** Default bound on tracked context-side requests. */
    public static final int DEFAULT_MAX_PENDING_REQUESTS = 65_536;
    /** Default: no journal. */
    public static final String DEFAULT_JOURNAL_DIR = "";
    /** Default: no part checksums. */
    public static final boolean DEFAULT_JOURNAL_CHECKSUMS = false;
    /** Default: authentication required. */
    public static final boolean DEFAULT_AUTH = true;
    /** Default: end-to-end part checksums on. */
    public static final boolean DEFAULT_PART_CHECKSUMS = true;
    /** Default: coalesce runs of blocks. */
    public static final boolean DEFAULT_COALESCE = true;
    /** Default: ready signals awaited with posted receives, no thread per waiting request. */
    public static final boolean DEFAULT_POSTED_READY = true;
    /** A request pool's idle thread spins as long as the transport prefers (its preferredPoolSpinMicros). */
    public static final int POOL_SPIN_TRANSPORT = -1;
    /** Default spin (µs) of a request pool's idle thread: {@link #POOL_SPIN_TRANSPORT}. */
    public static final int DEFAULT_POOL_SPIN_MICROS = POOL_SPIN_TRANSPORT;
    /** Default transfer mode. */
    public static final String DEFAULT_TRANSFER_MODE = "pull";
    /** Default local one-copy floor: 1 MiB (below it the grants and their set-up cost more than a message). */
    public static final long DEFAULT_LOCAL_ONE_COPY_MIN_BYTES = 1L << 20;

    private final String backend;
    private final String formatter;
    private final long transferBufferBytes;
    private final int maxTokensInBuffer;
    private final int sendConcurrency;
    private final int responderInfoWaitMicros;
    private final int recvSlots;
    private final boolean parallelReceive;
    private final boolean allowDynamicBuffers;
    private final long chunkBytes;
    private final Duration kvTransferTimeout;
    private final Duration senderFutureTimeout;
    private final Path timingDir;
    private final int requestThreadsPerPeerInstance;
    private final int maxPendingRequests;
    private final Path journalDir;
    private final boolean journalChecksums;
    private final boolean auth;
    private final Path authSecretFile;
    private final byte[] authSecret;
    private final boolean partChecksums;
    private final boolean coalesce;
    private final boolean postedReady;
    private final int poolSpinMicros;
    private final TransferMode transferMode;
    private final long localOneCopyMinBytes;

    /** Who starts a transfer. */
    public enum TransferMode {
        /** The generation side asks, the context side sends (two-sided messages). */
        PULL,
        /** The generation side registers its blocks, the context side writes them one-sided. */
        PUSH
    }

    private TransceiverConfig(Builder b, byte[] secret) {
        this.backend = b.backend;
        this.formatter = b.formatter;
        this.transferBufferBytes = b.transferBufferBytes;
        this.maxTokensInBuffer = b.maxTokensInBuffer;
        this.sendConcurrency = b.sendConcurrency;
        this.responderInfoWaitMicros = b.responderInfoWaitMicros;
        this.recvSlots = b.recvSlots;
        this.parallelReceive = b.parallelReceive;
        this.allowDynamicBuffers = b.allowDynamicBuffers;
        this.chunkBytes = b.chunkBytes;
        this.kvTransferTimeout = b.kvTransferTimeout;
        this.senderFutureTimeout = b.senderFutureTimeout;
        this.timingDir = b.timingDir;
        this.requestThreadsPerPeerInstance = b.requestThreadsPerPeerInstance;
        this.maxPendingRequests = b.maxPendingRequests;
        this.journalDir = b.journalDir;
        this.journalChecksums = b.journalChecksums;
        this.auth = b.auth;
        this.authSecretFile = b.authSecretFile;
        this.authSecret = secret;
        this.partChecksums = b.partChecksums;
        this.coalesce = b.coalesce;
        this.postedReady = b.postedReady;
        this.poolSpinMicros = b.poolSpinMicros;
        this.transferMode = b.transferMode;
        this.localOneCopyMinBytes = b.localOneCopyMinBytes;
    }

    /** @return a builder holding the defaults */
    public static Builder builder() {
        return new Builder();
    }

    /** @return the defaults */
    public static TransceiverConfig defaults() {
        return builder().build();
    }

    /**
     * Reads the {@code kvtransfer.*} properties of a map; other keys are ignored, an unknown
     * {@code kvtransfer.*} key is an error (it is almost always a typo).
     *
     * @param properties property names and values
     * @return the validated config
     * @throws IllegalArgumentException naming the key and value that is wrong
     */
    public static TransceiverConfig fromProperties(Map<String, String> properties) {
        Objects.requireNonNull(properties, "properties");
        return TransceiverProperties.read(properties);
    }

    /** @return every property of this config, names as in {@link #fromProperties(Map)} */
    public Map<String, String> toProperties() {
        return TransceiverProperties.write(this);
    }

    /** @return transport provider name */
    public String backend() {
        return backend;
    }

    /** @return the named formatter, or empty when it is chosen by attention type */
    public Optional<String> formatter() {
        return formatter.isEmpty() ? Optional.empty() : Optional.of(formatter);
    }

    /** @return bytes of one staging slot when {@link #maxTokensInBuffer()} is 0 */
    public long transferBufferBytes() {
        return transferBufferBytes;
    }

    /** @return tokens per staging slot, 0 = size from {@link #transferBufferBytes()} */
    public int maxTokensInBuffer() {
        return maxTokensInBuffer;
    }

    /** @return sender threads and send slots */
    public int sendConcurrency() {
        return sendConcurrency;
    }

    /**
     * @return how long (µs) the context side's responder waits for the info behind a header on an idle connection
     *         and reads it itself (one thread hand-off fewer per lone request) before leaving it to an info
     *         reader; 0 = never; -1 (the default) = the transport's preferredResponderInfoWaitMicros()
     */
    public int responderInfoWaitMicros() {
        return responderInfoWaitMicros;
    }

    /** @return receive slots */
    public int recvSlots() {
        return recvSlots;
    }

    /** @return whether per-peer parts move concurrently */
    public boolean parallelReceive() {
        return parallelReceive;
    }

    /** @return whether staging may fall back to dynamic buffers */
    public boolean allowDynamicBuffers() {
        return allowDynamicBuffers;
    }

    /** @return largest payload message, 0 = unchunked */
    public long chunkBytes() {
        return chunkBytes;
    }

    /** @return overall deadline of one request */
    public Duration kvTransferTimeout() {
        return kvTransferTimeout;
    }

    /** @return longest wait on one future per status check */
    public Duration senderFutureTimeout() {
        return senderFutureTimeout;
    }

    /** @return whether control messages are authenticated (the default) */
    public boolean authRequired() {
        return auth;
    }

    /** @return the configured secret file, empty when the per-JVM secret is used or authentication is off */
    public Optional<Path> authSecretFile() {
        return Optional.ofNullable(authSecretFile);
    }

    /**
     * The deployment secret: the secret file's bytes, or (no file) a random secret shared by every transceiver of
     * this JVM, which authenticates instances of one process and refuses peers of others until they share a file.
     *
     * @return a copy of the secret, or {@code null} when authentication is off
     */
    public byte[] authSecret() {
        return authSecret == null ? null : authSecret.clone();
    }

    /** @return whether every part carries an end-to-end CRC32C */
    public boolean partChecksums() {
        return partChecksums;
    }

    /** @return whether a pull this side requests coalesces runs of blocks ({@link #P_COALESCE}) */
    public boolean coalesce() {
        return coalesce;
    }

    /** @return whether ready signals are awaited with posted receives ({@link #P_POSTED_READY}) */
    public boolean postedReady() {
        return postedReady;
    }

    /**
     * @return how long one idle request-pool thread spins before it parks (µs; {@link #P_POOL_SPIN_MICROS}); -1 (the
     *         default) = the transport's preferredPoolSpinMicros()
     */
    public int poolSpinMicros() {
        return poolSpinMicros;
    }

    /** @return who starts a transfer */
    public TransferMode transferMode() {
        return transferMode;
    }

    /**
     * @return the smallest pull, in the whole model's KV bytes of the blocks to move, that takes the local one-copy
     *         path ({@link #P_LOCAL_ONE_COPY_MIN_BYTES}); 0 = any size
     */
    public long localOneCopyMinBytes() {
        return localOneCopyMinBytes;
    }

    /** @return the timing CSV directory, empty when timing output is off */
    public Optional<Path> timingDir() {
        return Optional.ofNullable(timingDir);
    }

    /** @return generation request threads per context instance */
    public int requestThreadsPerPeerInstance() {
        return requestThreadsPerPeerInstance;
    }

    /** @return most tracked context-side requests */
    public int maxPendingRequests() {
        return maxPendingRequests;
    }

    /** @return the journal directory, empty when journaling is off */
    public Optional<Path> journalDir() {
        return Optional.ofNullable(journalDir);
    }

    /** @return whether the journal records a CRC32C of every part */
    public boolean journalChecksums() {
        return journalChecksums;
    }

    /**
     * Bytes of one staging slot for a rank's block layout: with {@code maxTokensInBuffer} set, as TensorRT-LLM
     * does, {@code (maxTokens + tokensPerBlock) * bytesPerToken} where bytesPerToken covers all local layers,
     * kv planes and heads; else {@link #transferBufferBytes()}.
     *
     * @param layout the rank's block layout
     * @return the slot size in bytes
     * @throws IllegalArgumentException if maxTokensInBuffer is not a multiple of tokensPerBlock
     */
    public long slotBytes(BlockLayout layout) {
        Objects.requireNonNull(layout, "layout");
        if (maxTokensInBuffer == 0) {
            return transferBufferBytes;
        }
        if (maxTokensInBuffer % layout.tokensPerBlock() != 0) {
            throw new IllegalArgumentException(P_MAX_TOKENS_IN_BUFFER + " = " + maxTokensInBuffer
                    + ": must be a multiple of tokensPerBlock " + layout.tokensPerBlock());
        }
        long bytesPerToken = layout.blockBytes() / layout.tokensPerBlock();
        return (long) (maxTokensInBuffer + layout.tokensPerBlock()) * bytesPerToken;
    }

    /** @return a builder holding this config's values */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.backend = backend;
        b.formatter = formatter;
        b.transferBufferBytes = transferBufferBytes;
        b.maxTokensInBuffer = maxTokensInBuffer;
        b.sendConcurrency = sendConcurrency;
        b.responderInfoWaitMicros = responderInfoWaitMicros;
        b.recvSlots = recvSlots;
        b.parallelReceive = parallelReceive;
        b.allowDynamicBuffers = allowDynamicBuffers;
        b.chunkBytes = chunkBytes;
        b.kvTransferTimeout = kvTransferTimeout;
        b.senderFutureTimeout = senderFutureTimeout;
        b.timingDir = timingDir;
        b.requestThreadsPerPeerInstance = requestThreadsPerPeerInstance;
        b.maxPendingRequests = maxPendingRequests;
        b.journalDir = journalDir;
        b.journalChecksums = journalChecksums;
        b.auth = auth;
        b.authSecretFile = authSecretFile;
        b.partChecksums = partChecksums;
        b.coalesce = coalesce;
        b.postedReady = postedReady;
        b.poolSpinMicros = poolSpinMicros;
        b.transferMode = transferMode;
        b.localOneCopyMinBytes = localOneCopyMinBytes;
        return b;
    }

    @Override
    public String toString() {
        return "TransceiverConfig" + toProperties();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TransceiverConfig c && toProperties().equals(c.toProperties());
    }

    @Override
    public int hashCode() {
        return toProperties().hashCode();
    }

    /** Builds a {@link TransceiverConfig}; {@link #build()} validates. */
    public static final class Builder {
        // Package-private for TransceiverConfigValidation, which checks them; not API.
        String backend = DEFAULT_BACKEND;
        String formatter = DEFAULT_FORMATTER;
        long transferBufferBytes = DEFAULT_TRANSFER_BUFFER_BYTES;
        int maxTokensInBuffer = DEFAULT_MAX_TOKENS_IN_BUFFER;
        int sendConcurrency = DEFAULT_SEND_CONCURRENCY;
        int responderInfoWaitMicros = DEFAULT_RESPONDER_INFO_WAIT_MICROS;
        int recvSlots = DEFAULT_RECV_SLOTS;
        boolean parallelReceive = DEFAULT_PARALLEL_RECEIVE;
        boolean allowDynamicBuffers = DEFAULT_ALLOW_DYNAMIC_BUFFERS;
        long chunkBytes = DEFAULT_CHUNK_BYTES;
        Duration kvTransferTimeout = Duration.ofMillis(DEFAULT_KV_TRANSFER_TIMEOUT_MS);
        Duration senderFutureTimeout = Duration.ofMillis(DEFAULT_SENDER_FUTURE_TIMEOUT_MS);
        Path timingDir;
        int requestThreadsPerPeerInstance = DEFAULT_REQUEST_THREADS_PER_PEER_INSTANCE;
        int maxPendingRequests = DEFAULT_MAX_PENDING_REQUESTS;
        Path journalDir;
        boolean journalChecksums = DEFAULT_JOURNAL_CHECKSUMS;
        boolean auth = DEFAULT_AUTH;
        Path authSecretFile;
        boolean partChecksums = DEFAULT_PART_CHECKSUMS;
        boolean coalesce = DEFAULT_COALESCE;
        boolean postedReady = DEFAULT_POSTED_READY;
        int poolSpinMicros = DEFAULT_POOL_SPIN_MICROS;
        TransferMode transferMode = TransferMode.PULL;
        long localOneCopyMinBytes = DEFAULT_LOCAL_ONE_COPY_MIN_BYTES;

        private Builder() {
        }

        /** @param v transport name @return this builder */
        public Builder backend(String v) {
            this.backend = Objects.requireNonNull(v, "backend").trim();
            return this;
        }

        /** @param v formatter name, empty = by attention type @return this builder */
        public Builder formatter(String v) {
            this.formatter = Objects.requireNonNull(v, "formatter").trim();
            return this;
        }

        /** @param v slot bytes @return this builder */
        public Builder transferBufferBytes(long v) {
            this.transferBufferBytes = v;
            return this;
        }

        /** @param v tokens per slot, 0 = use bytes @return this builder */
        public Builder maxTokensInBuffer(int v) {
            this.maxTokensInBuffer = v;
            return this;
        }

        /** @param v sender threads and send slots @return this builder */
        public Builder sendConcurrency(int v) {
            this.sendConcurrency = v;
            return this;
        }

        /** @param v responder wait for an idle connection's info, µs (0 = never) @return this builder */
        public Builder responderInfoWaitMicros(int v) {
            this.responderInfoWaitMicros = v;
            return this;
        }

        /** @param v receive slots @return this builder */
        public Builder recvSlots(int v) {
            this.recvSlots = v;
            return this;
        }

        /** @param v parallel per-peer movement @return this builder */
        public Builder parallelReceive(boolean v) {
            this.parallelReceive = v;
            return this;
        }

        /** @param v dynamic staging fallback @return this builder */
        public Builder allowDynamicBuffers(boolean v) {
            this.allowDynamicBuffers = v;
            return this;
        }

        /** @param v largest payload message, 0 = unchunked @return this builder */
        public Builder chunkBytes(long v) {
            this.chunkBytes = v;
            return this;
        }

        /** @param v overall per-request deadline @return this builder */
        public Builder kvTransferTimeout(Duration v) {
            this.kvTransferTimeout = Objects.requireNonNull(v, "kvTransferTimeout");
            return this;
        }

        /** @param v wait per future per status check @return this builder */
        public Builder senderFutureTimeout(Duration v) {
            this.senderFutureTimeout = Objects.requireNonNull(v, "senderFutureTimeout");
            return this;
        }

        /** @param v timing CSV directory, null = off @return this builder */
        public Builder timingDir(Path v) {
            this.timingDir = v;
            return this;
        }

        /** @param v generation request threads per context instance @return this builder */
        public Builder requestThreadsPerPeerInstance(int v) {
            this.requestThreadsPerPeerInstance = v;
            return this;
        }

        /** @param v bound on tracked context-side requests @return this builder */
        public Builder maxPendingRequests(int v) {
            this.maxPendingRequests = v;
            return this;
        }

        /** @param v journal directory, null = no journal @return this builder */
        public Builder journalDir(Path v) {
            this.journalDir = v;
            return this;
        }

        /** @param v whether parts carry a CRC32C in the journal @return this builder */
        public Builder journalChecksums(boolean v) {
            this.journalChecksums = v;
            return this;
        }

        /**
         * @param v whether control messages are authenticated
         * @return this builder
         */
        public Builder auth(boolean v) {
            this.auth = v;
            return this;
        }

        /**
         * @param v the deployment's secret file, or null for the per-JVM secret
         * @return this builder
         */
        public Builder authSecretFile(Path v) {
            this.authSecretFile = v;
            return this;
        }

        /**
         * @param v whether parts carry end-to-end CRC32Cs
         * @return this builder
         */
        public Builder partChecksums(boolean v) {
            this.partChecksums = v;
            return this;
        }

        /**
         * @param v whether a pull coalesces runs of blocks consecutive on both sides
         * @return this builder
         */
        public Builder coalesce(boolean v) {
            this.coalesce = v;
            return this;
        }

        /** @param v {@link #P_POSTED_READY} @return this builder */
        public Builder postedReady(boolean v) {
            this.postedReady = v;
            return this;
        }

        /** @param v {@link #P_POOL_SPIN_MICROS}, 0 = parks at once, -1 = the transport's choice @return this builder */
        public Builder poolSpinMicros(int v) {
            this.poolSpinMicros = v;
            return this;
        }

        /**
         * @param v pull or push
         * @return this builder
         */
        public Builder transferMode(TransferMode v) {
            this.transferMode = Objects.requireNonNull(v, "transferMode");
            return this;
        }

        /** @param v {@link #P_LOCAL_ONE_COPY_MIN_BYTES}, 0 = any size @return this builder */
        public Builder localOneCopyMinBytes(long v) {
            this.localOneCopyMinBytes = v;
            return this;
        }

        /**
         * Validates and builds.
         *
         * @return the config
         * @throws IllegalArgumentException naming the offending property and value
         */
        public TransceiverConfig build() {
            TransceiverConfigValidation.check(this);
            return new TransceiverConfig(this, TransceiverConfigValidation.secret(this));
        }
    }
}
