package dev.kvtransfer.core;

import dev.kvtransfer.api.ConfigKey;

import java.util.List;

import static dev.kvtransfer.core.TransceiverConfig.*;

/** The {@code kvtransfer.*} keys of {@link TransceiverConfig} as data: the source of {@code docs/configuration.md}. */
public final class TransceiverConfigKeys {
    /**
     * Every property of {@link TransceiverConfig#fromProperties(java.util.Map)} with its default, the values it
     * accepts and its meaning, in the order of {@link TransceiverConfig#toProperties()}. Byte sizes accept a unit
     * suffix (K, M, G, T, KB, MiB, ...: 1024-based).
     */
    public static final List<ConfigKey> CONFIG_KEYS = List.of(
            new ConfigKey(P_BACKEND, DEFAULT_BACKEND, "a transport provider name (aeron, ucx, mpi, loopback, ...)",
                    "Transport that moves the bytes. Aeron needs nothing installed."),
            new ConfigKey(P_FORMATTER, DEFAULT_FORMATTER, "empty, or a formatter provider name",
                    "Cache formatter; empty chooses one by the cache's attention type (standard or mla)."),
            new ConfigKey(P_TRANSFER_BUFFER_BYTES, Long.toString(DEFAULT_TRANSFER_BUFFER_BYTES),
                    ">= 0 bytes (0 = dynamic buffers only)",
                    "Bytes of one staging slot of the transfer buffer pool, used when maxTokensInBuffer is 0."),
            new ConfigKey(P_MAX_TOKENS_IN_BUFFER, Integer.toString(DEFAULT_MAX_TOKENS_IN_BUFFER),
                    ">= 0, a multiple of tokensPerBlock",
                    "Tokens one staging slot holds (sizes the slot from the block layout); "
                            + "0 = use transferBufferBytes."),
            new ConfigKey(P_SEND_CONCURRENCY, Integer.toString(DEFAULT_SEND_CONCURRENCY), "[1, 1024]",
                    "Sender threads on the context side, and send slots of the buffer pool."),
            new ConfigKey(P_RESPONDER_INFO_WAIT_MICROS, Integer.toString(DEFAULT_RESPONDER_INFO_WAIT_MICROS),
                    "[-1, 100000] µs (-1 = the transport's choice, 0 = never)",
                    "How long the context responder waits for the request info behind a header on an idle connection, "
                            + "over a transport that does not post receives (unused over Aeron, UCX, loopback)."),
            new ConfigKey(P_RECV_SLOTS, Integer.toString(DEFAULT_RECV_SLOTS), "[1, 1024]",
                    "Receive slots of the buffer pool allocated up front; with dynamic buffers on, a receive that "
                            + "finds every slot held gets a new one."),
            new ConfigKey(P_PARALLEL_RECEIVE, Boolean.toString(DEFAULT_PARALLEL_RECEIVE), "true | false",
                    "Whether parts to and from different peers move concurrently."),
            new ConfigKey(P_ALLOW_DYNAMIC_BUFFERS, Boolean.toString(DEFAULT_ALLOW_DYNAMIC_BUFFERS), "true | false",
                    "Whether parts that do not fit a slot get dynamically allocated staging buffers."),
            new ConfigKey(P_CHUNK_BYTES, Long.toString(DEFAULT_CHUNK_BYTES), ">= 0 bytes (0 = no chunking)",
                    "Largest payload message; the requester's value travels in RequestInfo."),
            new ConfigKey(P_KV_TRANSFER_TIMEOUT_MS, Long.toString(DEFAULT_KV_TRANSFER_TIMEOUT_MS), "> 0 ms",
                    "Overall deadline of one request's transfer, from the async call."),
            new ConfigKey(P_SENDER_FUTURE_TIMEOUT_MS, Long.toString(DEFAULT_SENDER_FUTURE_TIMEOUT_MS), "> 0 ms",
                    "Longest wait on one request's future per status check."),
            new ConfigKey(P_TIMING_DIR, DEFAULT_TIMING_DIR, "empty, or a directory",
                    "Directory of the per-request timing CSV files (TensorRT-LLM's columns); "
                            + "empty = no timing output."),
            new ConfigKey(P_REQUEST_THREADS_PER_PEER_INSTANCE,
                    Integer.toString(DEFAULT_REQUEST_THREADS_PER_PEER_INSTANCE), "[1, 1024]",
                    "Generation-side request threads per context instance."),
            new ConfigKey(P_MAX_PENDING_REQUESTS, Integer.toString(DEFAULT_MAX_PENDING_REQUESTS), "[1, 16777216]",
                    "Most context-side requests (local or asked for) tracked at once before new ones are refused."),
            new ConfigKey(P_JOURNAL_DIR, DEFAULT_JOURNAL_DIR, "empty, or a directory",
                    "Directory of the transfer journal (one Chronicle Queue per rank); empty = no journal."),
            new ConfigKey(P_JOURNAL_CHECKSUMS, Boolean.toString(DEFAULT_JOURNAL_CHECKSUMS), "true | false",
                    "Whether the journal records a CRC32C of every part's payload "
                            + "(per-byte work on the transfer threads)."),
            new ConfigKey(P_AUTH, DEFAULT_AUTH ? "required" : "off", "required | off",
                    "Control-plane authentication with the deployment secret; off only on trusted networks."),
            new ConfigKey(P_AUTH_SECRET_FILE, "", "empty, or a file of at least 16 bytes",
                    "File holding the deployment's shared secret; empty = a random secret per JVM."),
            new ConfigKey(P_PART_CHECKSUMS, Boolean.toString(DEFAULT_PART_CHECKSUMS), "true | false",
                    "Whether every part carries an end-to-end CRC32C that the receiver checks before it completes."),
            new ConfigKey(P_COALESCE, Boolean.toString(DEFAULT_COALESCE), "true | false",
                    "Whether a pull coalesces blocks consecutive on both sides into one message; the requester "
                            + "decides for both sides. Push always coalesces."),
            new ConfigKey(P_POSTED_READY, Boolean.toString(DEFAULT_POSTED_READY), "true | false",
                    "Whether the generation side awaits ready signals with posted receives (no request thread held "
                            + "while the context side prefills) on transports that support them."),
            new ConfigKey(P_POOL_SPIN_MICROS, Integer.toString(DEFAULT_POOL_SPIN_MICROS),
                    "[-1, 100000] µs (-1 = the transport's choice, 0 = parks at once)",
                    "How long one idle thread of a request pool (generation request threads, context info threads) "
                            + "spins, yielding, for the next task before it parks, while at most 2 requests are in "
                            + "flight on its side. A hand-off within it reaches a running thread instead of waking a "
                            + "parked one; at most one thread per pool spins. The transport's choice: Aeron spins "
                            + "as long as its agents (aeron.spinMicros), UCX and MPI do not spin."),
            new ConfigKey(P_TRANSFER_MODE, DEFAULT_TRANSFER_MODE, "pull | push",
                    "Who starts a transfer: pull (the generation side asks, the context side sends) or push (the "
                            + "generation side registers its blocks, the context side writes them one-sided). A pull "
                            + "between instances whose every rank is local moves as one-copy writes where the "
                            + "transport offers them (Aeron: aeron.sharedMemoryWrites with a deployment secret) and "
                            + "the request reaches localOneCopyMinBytes."),
            new ConfigKey(P_LOCAL_ONE_COPY_MIN_BYTES, Long.toString(DEFAULT_LOCAL_ONE_COPY_MIN_BYTES),
                    ">= 0 bytes (0 = any size)",
                    "Smallest pull between local instances that moves as one-copy writes, counted as the blocks "
                            + "to move (prompt blocks less reused ones) times the whole model's KV bytes per block "
                            + "(all layers and KV heads), which every generation rank computes alike; a smaller pull "
                            + "moves as messages. Push is not affected. Must be alike on every generation rank."));

    private TransceiverConfigKeys() {
    }
}
