package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.ErrorHandler;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;

/**
 * The meters of one rank, every one tagged {@code instance} and {@code rank}, and the path every background error
 * takes: log, counter, error handler. Names (Prometheus spelling in brackets; close to vLLM's NIXL connector
 * metrics: transfer time, bytes transferred, descriptors, failed transfers):
 * <ul>
 *   <li>{@code kvtransfer.transfers{role,outcome}} ({@code kvtransfer_transfers_total}): requests ended, by
 *       {@code role} (context, generation) and {@code outcome} (complete, failed);</li>
 *   <li>{@code kvtransfer.bytes{role}} ({@code kvtransfer_bytes_total}): KV bytes moved;</li>
 *   <li>the copy ledger of completed requests ({@link dev.kvtransfer.core.CopyLedger}):
 *       {@code kvtransfer.copy.bytes{role,stage}} ({@code kvtransfer_copy_bytes_total}; {@code stage} staging:
 *       bytes gathered or scattered through staging; transport: bytes times the transport's passes per byte),
 *       {@code kvtransfer.copy.unknown.bytes{role}} (bytes whose transport passes are not known) and
 *       {@code kvtransfer.checksum.bytes{role}} (bytes checksummed); divided by {@code kvtransfer.bytes} they are
 *       passes per byte moved;</li>
 *   <li>{@code kvtransfer.transfer.bytes{role}} ({@code kvtransfer_transfer_bytes}, histogram): per completed
 *       request, the KV bytes this rank moved (vLLM's {@code nixl_bytes_transferred});</li>
 *   <li>{@code kvtransfer.errors{code}} ({@code kvtransfer_errors_total}): errors by {@link ErrorCode}, OTHER for
 *       the unexpected;</li>
 *   <li>{@code kvtransfer.transfer.time{role}} ({@code kvtransfer_transfer_time_seconds}, histogram): per
 *       completed request, from the start of this rank's transfer to its end;</li>
 *   <li>{@code kvtransfer.messages{role}} ({@code kvtransfer_messages}, summary): payload messages (pull) or
 *       write entries (push) one request used (NIXL's descriptors);</li>
 *   <li>{@code kvtransfer.peer.bandwidth{role,peer}} ({@code kvtransfer_peer_bandwidth_bytes_per_second},
 *       histogram): per completed request and counterpart rank ({@code peer} = its rank index in its instance),
 *       bytes moved with it over the request's transfer time;</li>
 *   <li>{@code kvtransfer.staging.wait{direction}} ({@code kvtransfer_staging_wait_seconds}, histogram): how long
 *       an acquire of a staging slot waited when none was free; {@code kvtransfer.staging.slots.busy{direction}}
 *       and {@code kvtransfer.staging.slots{direction}} (gauges): slots held and slots in all;</li>
 *   <li>{@code kvtransfer.requests.inflight{role}} (gauge): requests accepted and not yet ended;</li>
 *   <li>{@code kvtransfer.sender.inline} ({@code kvtransfer_sender_inline_total}): small requests a context rank's
 *       info reader served itself instead of handing them to a sender thread.</li>
 * </ul>
 */
public final class TransferMetrics {
    private static final Logger LOG = LoggerFactory.getLogger(TransferMetrics.class);

    private final ErrorHandler handler;
    private final Map<ErrorCode, Counter> errors = new EnumMap<>(ErrorCode.class);
    private final Counter otherErrors;
    private final Counter sentOk;
    private final Counter sentFailed;
    private final Counter recvOk;
    private final Counter recvFailed;
    private final Counter bytesSent;
    private final Counter bytesReceived;
    /** The copy ledger per role (context, generation): staged, transport, transport unknown, checksummed. */
    private final Counter[][] ledger = new Counter[2][];
    private final DistributionSummary transferBytesSent;
    private final DistributionSummary transferBytesReceived;
    private final DistributionSummary messagesSent;
    private final DistributionSummary messagesReceived;
    private final Timer timeSent;
    private final Timer timeReceived;
    private final Counter sentInline;
    private final MeterRegistry registry;
    private final Tags base;
    private final java.util.concurrent.ConcurrentHashMap<Long, DistributionSummary> bandwidth =
            new java.util.concurrent.ConcurrentHashMap<>();
    private final Map<dev.kvtransfer.api.format.TransferBufferPool.Direction, Timer> stagingWaits =
            new EnumMap<>(dev.kvtransfer.api.format.TransferBufferPool.Direction.class);

    /**
     * Registers the meters.
     *
     * @param registry where meters live
     * @param instance tag value naming this rank's instance
     * @param rank     tag value naming this rank
     * @param handler  receives every background error
     */
    public TransferMetrics(MeterRegistry registry, String instance, String rank, ErrorHandler handler) {
        this.registry = Objects.requireNonNull(registry, "registry");
        this.handler = Objects.requireNonNull(handler, "handler");
        this.base = Tags.of("instance", Objects.requireNonNull(instance, "instance"), "rank", rank);
        for (ErrorCode c : ErrorCode.values()) {
            errors.put(c, Counter.builder("kvtransfer.errors").tags(base).tag("code", c.name())
                    .register(registry));
        }
        otherErrors = Counter.builder("kvtransfer.errors").tags(base).tag("code", "OTHER").register(registry);
        sentOk = transfers(registry, base, "context", "complete");
        sentFailed = transfers(registry, base, "context", "failed");
        recvOk = transfers(registry, base, "generation", "complete");
        recvFailed = transfers(registry, base, "generation", "failed");
        bytesSent = Counter.builder("kvtransfer.bytes").tags(base).tag("role", "context").register(registry);
        bytesReceived = Counter.builder("kvtransfer.bytes").tags(base).tag("role", "generation")
                .register(registry);
        for (int r = 0; r < 2; r++) {
            String role = r == 0 ? "context" : "generation";
            ledger[r] = new Counter[] {
                Counter.builder("kvtransfer.copy.bytes").tags(base).tag("role", role).tag("stage", "staging")
                        .description("bytes copied through a staging buffer (a gather or a scatter)")
                        .register(registry),
                Counter.builder("kvtransfer.copy.bytes").tags(base).tag("role", role).tag("stage", "transport")
                        .description("bytes times the transport's passes per byte (Connection.copiesPerByte)")
                        .register(registry),
                Counter.builder("kvtransfer.copy.unknown.bytes").tags(base).tag("role", role)
                        .description("bytes whose transport passes are not known").register(registry),
                Counter.builder("kvtransfer.checksum.bytes").tags(base).tag("role", role)
                        .description("bytes checksummed (CRC32C)").register(registry)};
        }
        transferBytesSent = transferBytes(registry, base, "context");
        transferBytesReceived = transferBytes(registry, base, "generation");
        messagesSent = messages(registry, base, "context");
        messagesReceived = messages(registry, base, "generation");
        timeSent = time(registry, base, "context");
        timeReceived = time(registry, base, "generation");
        sentInline = Counter.builder("kvtransfer.sender.inline").tags(base)
                .description("small requests an info reader served itself (no hand-off to a sender thread)")
                .register(registry);
        for (dev.kvtransfer.api.format.TransferBufferPool.Direction d
                : dev.kvtransfer.api.format.TransferBufferPool.Direction.values()) {
            stagingWaits.put(d, Timer.builder("kvtransfer.staging.wait").tags(base)
                    .tag("direction", d.name().toLowerCase(java.util.Locale.ROOT))
                    .description("time an acquire of a staging slot waited when none was free")
                    .publishPercentileHistogram().register(registry));
        }
    }

    /** Counts one request served on the info reader's thread. */
    void inlineSend() {
        sentInline.increment();
    }

    private static Timer time(MeterRegistry r, Tags base, String role) {
        return Timer.builder("kvtransfer.transfer.time").tags(base).tag("role", role)
                .description("per completed request: this rank's transfer, start to end")
                .publishPercentileHistogram().register(r);
    }

    private static DistributionSummary transferBytes(MeterRegistry r, Tags base, String role) {
        return DistributionSummary.builder("kvtransfer.transfer.bytes").tags(base).tag("role", role)
                .baseUnit("bytes").description("per completed request: KV bytes this rank moved")
                .publishPercentileHistogram().register(r);
    }

    private static DistributionSummary messages(MeterRegistry r, Tags base, String role) {
        return DistributionSummary.builder("kvtransfer.messages").tags(base).tag("role", role)
                .description("payload messages (pull) or write entries (push) one request used").register(r);
    }

    private static Counter transfers(MeterRegistry r, Tags base, String role, String outcome) {
        return Counter.builder("kvtransfer.transfers").tags(base).tag("role", role).tag("outcome", outcome)
                .register(r);
    }

    /**
     * Reports a background error: logs it, counts it by code and hands it to the error handler (whose own
     * failures are logged, never propagated).
     *
     * @param error the error
     */
    public void error(Throwable error) {
        if (error instanceof KvTransferException k) {
            errors.get(k.code()).increment();
            LOG.warn("{}", k.getMessage(), k.getCause());
        } else {
            otherErrors.increment();
            LOG.error("unexpected error", error);
        }
        try {
            handler.onError(error);
        } catch (RuntimeException e) {
            LOG.error("error handler failed on {}", error, e);
        }
    }

    /**
     * Counts a request's outcome.
     *
     * @param sender true on the context side
     * @param ok     whether it completed
     * @param bytes  bytes moved
     */
    public void outcome(boolean sender, boolean ok, long bytes) {
        // Bytes first: a request counted as ended has its bytes counted already.
        (sender ? bytesSent : bytesReceived).increment(bytes);
        if (ok) {
            (sender ? transferBytesSent : transferBytesReceived).record(bytes);
        }
        if (sender) {
            (ok ? sentOk : sentFailed).increment();
        } else {
            (ok ? recvOk : recvFailed).increment();
        }
    }

    /**
     * Records how many payload messages (pull) or write entries (push) one completed request used.
     *
     * @param sender true on the context side
     * @param n      messages or entries
     */
    public void messages(boolean sender, int n) {
        (sender ? messagesSent : messagesReceived).record(n);
    }

    /**
     * Adds a completed request's copy ledger on this rank.
     *
     * @param sender true on the context side
     * @param l      the ledger
     */
    public void ledger(boolean sender, dev.kvtransfer.core.CopyLedger l) {
        Counter[] c = ledger[sender ? 0 : 1];
        c[0].increment(l.staged());
        c[1].increment(l.transport());
        c[2].increment(l.transportUnknown());
        c[3].increment(l.checksummed());
    }

    /**
     * Records a completed request's transfer time on this rank and the bandwidth with each counterpart.
     *
     * @param sender    true on the context side
     * @param nanos     the transfer's duration
     * @param peerRanks each counterpart's rank index in its instance
     * @param peerBytes bytes moved with each counterpart, in the order of {@code peerRanks}
     */
    public void completed(boolean sender, long nanos, java.util.List<Integer> peerRanks, long[] peerBytes) {
        long d = Math.max(1, nanos);
        (sender ? timeSent : timeReceived).record(d, java.util.concurrent.TimeUnit.NANOSECONDS);
        for (int k = 0; k < peerRanks.size() && k < peerBytes.length; k++) {
            if (peerBytes[k] <= 0) {
                continue;
            }
            int peer = peerRanks.get(k);
            long key = ((long) peer << 1) | (sender ? 1 : 0);
            DistributionSummary s = bandwidth.computeIfAbsent(key, x -> DistributionSummary
                    .builder("kvtransfer.peer.bandwidth").tags(base).tag("role", sender ? "context" : "generation")
                    .tag("peer", Integer.toString(peer)).baseUnit("bytes_per_second")
                    .description("per completed request: bytes moved with one counterpart rank over the transfer time")
                    .publishPercentileHistogram().register(registry));
            s.record(peerBytes[k] * 1e9 / d);
        }
    }

    /**
     * Records how long a staging-slot acquire waited.
     *
     * @param direction the slot's direction
     * @param nanos     time waited
     */
    public void stagingWait(dev.kvtransfer.api.format.TransferBufferPool.Direction direction, long nanos) {
        stagingWaits.get(direction).record(Math.max(0, nanos), java.util.concurrent.TimeUnit.NANOSECONDS);
    }

    /**
     * Registers the staging pool's gauges (slots held, slots in all, per direction).
     *
     * @param pool the rank's staging pool
     */
    public void stagingPool(dev.kvtransfer.core.buffer.DefaultTransferBufferPool pool) {
        for (dev.kvtransfer.api.format.TransferBufferPool.Direction d
                : dev.kvtransfer.api.format.TransferBufferPool.Direction.values()) {
            String dir = d.name().toLowerCase(java.util.Locale.ROOT);
            Gauge.builder("kvtransfer.staging.slots.busy", pool, p -> p.slotCount(d) - p.freeSlots(d)).tags(base)
                    .tag("direction", dir).description("staging slots held").register(registry);
            Gauge.builder("kvtransfer.staging.slots", pool, p -> p.slotCount(d)).tags(base).tag("direction", dir)
                    .description("staging slots in all").register(registry);
        }
    }

    /**
     * Registers the requests-in-flight gauges of a rank.
     *
     * @param owner     what the gauges read (held weakly)
     * @param contexts  context requests accepted and not ended
     * @param gens      generation requests accepted and not ended
     * @param <T>       the owner's type
     */
    public <T> void inFlight(T owner, java.util.function.ToDoubleFunction<T> contexts,
                             java.util.function.ToDoubleFunction<T> gens) {
        Gauge.builder("kvtransfer.requests.inflight", owner, contexts).tags(base).tag("role", "context")
                .description("requests accepted and not yet ended").register(registry);
        Gauge.builder("kvtransfer.requests.inflight", owner, gens).tags(base).tag("role", "generation")
                .description("requests accepted and not yet ended").register(registry);
    }
}
