package dev.kvtransfer.bench;

import dev.kvtransfer.api.transport.RawBaseline;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.Objects;

/** A transport's own {@link RawBaseline}, reached through {@code TransportProvider.rawBaseline()}. */
final class SpiBaseline implements Baseline {
    private final RawBaseline raw;
    private final TransportConfig config;

    SpiBaseline(RawBaseline raw, TransportConfig config) {
        this.raw = Objects.requireNonNull(raw, "raw");
        this.config = Objects.requireNonNull(config, "config");
    }

    @Override
    public String describe() {
        return raw.describe(config);
    }

    @Override
    public Result measure(long messageBytes, long warmupMessages, long messages, int warmupSamples, int samples,
            Duration timeout) {
        RawBaseline.Throughput t = raw.throughput(config, messageBytes, warmupMessages, messages, timeout);
        RawBaseline.Latency l = raw.latency(config, messageBytes, warmupSamples, samples, timeout);
        return new Result(t.channel(), messageBytes, t.messages(), t.nanos(), Latencies.of(l.roundTripNanos()), "");
    }
}
