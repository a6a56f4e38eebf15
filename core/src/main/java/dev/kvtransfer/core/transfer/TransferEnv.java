package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.timing.TimingCsvWriter;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ExecutorService;

/**
 * Internal: what the sender and the receiver of one rank share.
 *
 * @param config       settings
 * @param selfState    this rank's cache state and its instance's comm state (selfIndex set)
 * @param connections  this rank's transport endpoint
 * @param formatter    the cache formatter
 * @param cache        this rank's KV pool (the formatter's): regions registered for pushes
 * @param pool         staging pool handed to sessions
 * @param buffers      allocates control buffers and copies
 * @param metrics      counters and the error path
 * @param timing       CSV writer, or null when timing output is off
 * @param peerExecutor runs per-peer actions when parallel transfer is on, or null
 * @param threadPrefix prefix of this rank's thread names
 * @param journal      where transfer events are recorded ({@link TransferJournal#NOOP} when off)
 * @param auth         control-plane authentication ({@link ControlAuth#OFF} when off)
 */
public record TransferEnv(TransceiverConfig config, TransceiverState selfState, ConnectionManager connections,
                          CacheFormatter formatter, dev.kvtransfer.api.cache.KvCacheView cache, TransferBufferPool pool,
                          BufferManager buffers,
                          TransferMetrics metrics, TimingCsvWriter timing, ExecutorService peerExecutor,
                          String threadPrefix, TransferJournal journal, ControlAuth auth) {
    /** Longest wait of one control message (ready signals aside, which wait on the request's deadline). */
    public static final Duration MAX_CONTROL_TIMEOUT = Duration.ofSeconds(5);

    /**
     * Checks for nulls.
     *
     * @param config       settings
     * @param selfState    this rank's state
     * @param connections  endpoint
     * @param formatter    formatter
     * @param pool         staging pool
     * @param buffers      buffers
     * @param metrics      metrics
     * @param timing       timing writer or null
     * @param peerExecutor per-peer executor or null
     * @param threadPrefix thread name prefix
     */
    public TransferEnv {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(selfState, "selfState");
        Objects.requireNonNull(connections, "connections");
        Objects.requireNonNull(formatter, "formatter");
        Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(pool, "pool");
        Objects.requireNonNull(buffers, "buffers");
        Objects.requireNonNull(metrics, "metrics");
        Objects.requireNonNull(threadPrefix, "threadPrefix");
        Objects.requireNonNull(journal, "journal");
        Objects.requireNonNull(auth, "auth");
        if (selfState.selfIndex() < 0) {
            throw new IllegalArgumentException("selfState must carry this rank's selfIndex");
        }
    }


    /** @return this rank's cache state */
    public CacheState selfCache() {
        return selfState.cacheState();
    }

    /** @return this rank's index in its instance */
    public int selfIndex() {
        return selfState.selfIndex();
    }

    /** @return the deadline of one control message */
    public Duration controlTimeout() {
        Duration t = config.kvTransferTimeout();
        return t.compareTo(MAX_CONTROL_TIMEOUT) < 0 ? t : MAX_CONTROL_TIMEOUT;
    }

    /** @return whether this rank owns no layer (it has no counterpart and moves nothing) */
    public boolean ownsNoLayer() {
        CacheState s = selfCache();
        return s.layerCount(s.ppRank(selfIndex())) == 0;
    }

}
