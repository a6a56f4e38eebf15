package dev.kvtransfer.bench;

import java.time.Duration;

/**
 * A raw library baseline the bench runs beside ours: the transport's own {@link
 * dev.kvtransfer.api.transport.RawBaseline} (through the SPI) or, for a transport that offers none, a tool the
 * bench knows ({@code ucx_perftest}, a C {@code MPI_Send} / {@code MPI_Recv} loop). Found with
 * {@link Baselines#find}; the cli's {@code demo --raw-baseline} uses the same ones.
 */
public interface Baseline extends AutoCloseable {
    /**
     * What one measurement gives: streaming throughput and round-trip percentiles (µs; {@code NaN} for figures the
     * tool does not report).
     *
     * @param source       what ran
     * @param messageBytes bytes per message
     * @param messages     timed messages of the throughput part
     * @param nanos        their elapsed time
     * @param latency      round-trip percentiles
     * @param note         what the reader must know (empty when nothing)
     */
    record Result(String source, long messageBytes, long messages, long nanos, Latencies.Percentiles latency,
                  String note) {
    }

    /** @return one line: what runs */
    String describe();

    /**
     * Throughput of {@code warmupMessages + messages} messages (the last {@code messages} timed), then
     * {@code warmupSamples + samples} round trips.
     *
     * @param messageBytes   bytes per message
     * @param warmupMessages untimed messages
     * @param messages       timed messages
     * @param warmupSamples  untimed round trips
     * @param samples        timed round trips
     * @param timeout        bound on each part
     * @return the result
     */
    Result measure(long messageBytes, long warmupMessages, long messages, int warmupSamples, int samples,
                   Duration timeout);

    /** Releases what the baseline keeps between measurements (e.g. the compiled MPI program); idempotent. */
    @Override
    default void close() {
    }
}
