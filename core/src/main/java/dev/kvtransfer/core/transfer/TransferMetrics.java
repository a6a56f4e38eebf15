package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.ErrorHandler;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;

/**
 * Counters of one rank ({@code kvtransfer.errors{code}}, {@code kvtransfer.transfers{role,outcome}},
 * {@code kvtransfer.bytes{role}}, {@code kvtransfer.messages{role}}: payload messages or write entries per
 * request) and the path every background error takes: log, counter, error handler.
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
    private final DistributionSummary messagesSent;
    private final DistributionSummary messagesReceived;

    /**
     * Registers the counters.
     *
     * @param registry where counters live
     * @param rank     tag value naming this rank
     * @param handler  receives every background error
     */
    public TransferMetrics(MeterRegistry registry, String rank, ErrorHandler handler) {
        Objects.requireNonNull(registry, "registry");
        this.handler = Objects.requireNonNull(handler, "handler");
        for (ErrorCode c : ErrorCode.values()) {
            errors.put(c, Counter.builder("kvtransfer.errors").tag("rank", rank).tag("code", c.name())
                    .register(registry));
        }
        otherErrors = Counter.builder("kvtransfer.errors").tag("rank", rank).tag("code", "OTHER").register(registry);
        sentOk = transfers(registry, rank, "context", "complete");
        sentFailed = transfers(registry, rank, "context", "failed");
        recvOk = transfers(registry, rank, "generation", "complete");
        recvFailed = transfers(registry, rank, "generation", "failed");
        bytesSent = Counter.builder("kvtransfer.bytes").tag("rank", rank).tag("role", "context").register(registry);
        bytesReceived = Counter.builder("kvtransfer.bytes").tag("rank", rank).tag("role", "generation")
                .register(registry);
        messagesSent = messages(registry, rank, "context");
        messagesReceived = messages(registry, rank, "generation");
    }

    private static DistributionSummary messages(MeterRegistry r, String rank, String role) {
        return DistributionSummary.builder("kvtransfer.messages").tag("rank", rank).tag("role", role)
                .description("payload messages (pull) or write entries (push) one request used").register(r);
    }

    private static Counter transfers(MeterRegistry r, String rank, String role, String outcome) {
        return Counter.builder("kvtransfer.transfers").tag("rank", rank).tag("role", role).tag("outcome", outcome)
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
        if (sender) {
            (ok ? sentOk : sentFailed).increment();
            bytesSent.increment(bytes);
        } else {
            (ok ? recvOk : recvFailed).increment();
            bytesReceived.increment(bytes);
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
}
