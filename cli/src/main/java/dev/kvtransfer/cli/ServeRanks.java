package dev.kvtransfer.cli;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.local.LocalInstance;

import java.util.List;
import java.util.stream.IntStream;

/**
 * The ranks of a served instance that live in this process: all of them ({@link LocalInstance}, the default) or
 * one ({@link OneRank}, {@code serve --rank R}). What {@link ContextService} and {@link RankStatusPump} need.
 */
interface ServeRanks {
    /** @return the instance's name */
    String name();

    /** @return the instance's cache state */
    CacheState cacheState();

    /** @return rank r's cache state (with attention DP: its own DP rank) */
    CacheState cacheState(int rank);

    /** @return rank r's KV pool; r must be {@linkplain #local() local} */
    PagedKvCache cache(int rank);

    /** @return rank r's memory */
    BufferManager bufferManager(int rank);

    /** @return rank r's transceiver */
    CacheTransceiver transceiver(int rank);

    /** @return the ranks in this process, ascending */
    List<Integer> local();

    /** @return every rank's transport address, index = rank */
    List<String> addresses();

    /**
     * @param requestId the request
     * @param rank      a local rank
     * @return the request's context-phase parameters as that rank hands them out
     */
    default ContextPhaseParams contextPhaseParams(long requestId, int rank) {
        return transceiver(rank).contextPhaseParams(requestId, new long[0]);
    }

    /** @return every rank of a {@link LocalInstance} */
    static ServeRanks of(LocalInstance instance) {
        List<Integer> all = IntStream.range(0, instance.ranks()).boxed().toList();
        return new ServeRanks() {
            @Override
            public String name() {
                return instance.name();
            }

            @Override
            public CacheState cacheState() {
                return instance.cacheState();
            }

            @Override
            public CacheState cacheState(int rank) {
                return instance.cacheState(rank);
            }

            @Override
            public PagedKvCache cache(int rank) {
                return instance.cache(rank);
            }

            @Override
            public BufferManager bufferManager(int rank) {
                return instance.bufferManager(rank);
            }

            @Override
            public CacheTransceiver transceiver(int rank) {
                return instance.transceiver(rank);
            }

            @Override
            public List<Integer> local() {
                return all;
            }

            @Override
            public List<String> addresses() {
                return instance.commState().addresses();
            }
        };
    }
}
