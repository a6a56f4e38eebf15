package dev.kvtransfer.core;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.journal.ChronicleTransferJournal;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

import java.util.Objects;

/**
 * The one way a rank's {@link CacheTransceiver} is put together, whoever starts the rank ({@code LocalInstance},
 * the Guice {@code CacheTransceiverFactory}, an MPI rank, an engine): it picks the formatter (given, else by
 * the config's {@code kvtransfer.formatter} name, else by the cache's attention type), creates the rank's staging
 * pool ({@link TransceiverConfig#slotBytes} per slot, {@code sendConcurrency} send and {@code recvSlots} receive
 * slots, dynamic buffers as configured), the formatter over the rank's KV pool, the rank's journal queue when
 * {@code kvtransfer.journalDir} is set ({@code <journalDir>/<instance>-rank-<r>}, checksums as configured), and
 * the transceiver, whose timing CSV ({@code kvtransfer.timingDir}) and metrics ({@link TransferMetrics} meters in
 * the given registry) it wires. Every {@link TransceiverConfig} key takes effect here or in the transceiver.
 *
 * <p>Ownership: the transceiver owns the pool and the journal (closes them after its threads stopped); the
 * connection manager, KV pool, buffer manager and groups stay the caller's.
 */
public final class RankAssembly {
    private final TransceiverConfig config;
    private String instance = "rank";
    private CacheState state;
    private int selfIndex = -1;
    private CommState commState;
    private ConnectionManager connections;
    private KvCacheView cache;
    private BufferManager buffers;
    private GroupComm contextGroup;
    private GroupComm generationGroup;
    private FormatterProvider formatter;
    private Plugins plugins;
    private ErrorHandler errors = e -> { };
    private MeterRegistry meters;
    private byte[] tokenIssuingKey;

    private RankAssembly(TransceiverConfig config) {
        this.config = Objects.requireNonNull(config, "config");
    }

    /**
     * Starts assembling one rank.
     *
     * @param config the rank's settings
     * @return the assembly
     */
    public static RankAssembly of(TransceiverConfig config) {
        return new RankAssembly(config);
    }

    /**
     * @param instanceName the instance's name (journal queue and thread names), e.g. {@code "ctx"}
     * @param cacheState   the rank's cache state (with attention DP: its own DP rank)
     * @param rank         the rank's index in its instance
     * @param comm         every rank's address in the instance
     * @return this assembly
     */
    public RankAssembly rank(String instanceName, CacheState cacheState, int rank, CommState comm) {
        this.instance = Objects.requireNonNull(instanceName, "instanceName");
        this.state = Objects.requireNonNull(cacheState, "cacheState");
        this.selfIndex = rank;
        this.commState = Objects.requireNonNull(comm, "comm");
        return this;
    }

    /**
     * @param cm the rank's transport endpoint (the caller's to close)
     * @return this assembly
     */
    public RankAssembly connections(ConnectionManager cm) {
        this.connections = Objects.requireNonNull(cm, "connections");
        return this;
    }

    /**
     * @param kvPool the rank's KV pool (the caller's)
     * @param bm     allocates staging and control memory, copies (the caller's)
     * @return this assembly
     */
    public RankAssembly memory(KvCacheView kvPool, BufferManager bm) {
        this.cache = Objects.requireNonNull(kvPool, "cache");
        this.buffers = Objects.requireNonNull(bm, "buffers");
        return this;
    }

    /**
     * The status groups (reference §5): context completion is agreed by the rank's TP group of its PP stage (with
     * attention DP: its DP group of the stage), generation completion by the whole generation instance (with
     * attention DP: the DP group across every PP stage).
     *
     * @param context    the context-side group
     * @param generation the generation-side group
     * @return this assembly
     */
    public RankAssembly groups(GroupComm context, GroupComm generation) {
        this.contextGroup = Objects.requireNonNull(context, "context");
        this.generationGroup = Objects.requireNonNull(generation, "generation");
        return this;
    }

    /**
     * @param provider the formatter (default: by config name, else by attention type, from {@link Plugins})
     * @return this assembly
     */
    public RankAssembly formatter(FormatterProvider provider) {
        this.formatter = Objects.requireNonNull(provider, "formatter");
        return this;
    }

    /**
     * @param found where formatters are looked up when none is given (default: {@link Plugins#discover()})
     * @return this assembly
     */
    public RankAssembly plugins(Plugins found) {
        this.plugins = Objects.requireNonNull(found, "plugins");
        return this;
    }

    /**
     * @param handler background errors (after they are logged and counted)
     * @param registry where the transceiver's meters go (default: a new {@link SimpleMeterRegistry})
     * @return this assembly
     */
    public RankAssembly observability(ErrorHandler handler, MeterRegistry registry) {
        this.errors = Objects.requireNonNull(handler, "errorHandler");
        this.meters = Objects.requireNonNull(registry, "meters");
        return this;
    }

    /**
     * The formatter provider this assembly uses.
     *
     * @return the given one, else the config's named one, else the one for the cache's attention type
     */
    public FormatterProvider formatterProvider() {
        if (formatter != null) {
            return formatter;
        }
        Plugins p = plugins != null ? plugins : Plugins.discover();
        return config.formatter().map(p::formatter).orElseGet(() -> p.formatterFor(state.attentionType()));
    }

    /**
     * The key the ranks of this rank's instance issue and check request tokens with (every rank of one context
     * instance gets the same; no generation instance ever does). Without it the rank draws a random key of its
     * own, and its tokens verify on this rank only.
     *
     * @param key at least 16 bytes (e.g. {@code ControlAuth.newIssuingKey()}), or null for a key of the rank's own
     * @return this assembly
     */
    public RankAssembly tokenIssuingKey(byte[] key) {
        this.tokenIssuingKey = key == null ? null : key.clone();
        return this;
    }

    /**
     * Builds the rank's transceiver.
     *
     * @return the transceiver, owning its pool and journal
     * @throws IllegalStateException when a required part is missing
     */
    public CacheTransceiver build() {
        require(state != null, "rank(...)");
        require(connections != null, "connections(...)");
        require(cache != null, "memory(...)");
        require(contextGroup != null, "groups(...)");
        FormatterProvider fp = formatterProvider();
        long slot = Math.max(config.slotBytes(cache.layout()), HostBufferManager.PAGE_SIZE);
        // A device pool stages through pinned memory: device copies at DMA speed, and every transport sends it.
        dev.kvtransfer.api.memory.MemoryKind poolKind = cache.regionCount() > 0 ? cache.region(0).kind()
                : dev.kvtransfer.api.memory.MemoryKind.HOST;
        DefaultTransferBufferPool pool = new DefaultTransferBufferPool(buffers, slot, config.sendConcurrency(),
                config.recvSlots(), config.allowDynamicBuffers(), DefaultTransferBufferPool.stagingKindFor(poolKind));
        TransferJournal journal = TransferJournal.NOOP;
        try {
            CacheFormatter f = fp.create(cache, pool);
            if (config.journalDir().isPresent()) {
                journal = ChronicleTransferJournal.open(config.journalDir().get(), instance, selfIndex, state,
                        config.journalChecksums(), errors);
            }
            return new CacheTransceiver(config, state, selfIndex, commState, connections, f, cache, pool, buffers,
                    contextGroup, generationGroup, errors, meters != null ? meters : new SimpleMeterRegistry(),
                    journal, instance, tokenIssuingKey).closeWith(pool).closeWith(journal);
        } catch (RuntimeException | Error e) {
            journal.close();
            pool.close();
            throw e;
        }
    }

    private static void require(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException("RankAssembly needs " + what + " before build()");
        }
    }
}
