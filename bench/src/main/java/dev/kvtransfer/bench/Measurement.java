package dev.kvtransfer.bench;

import java.util.Objects;

/**
 * One timed run of one configuration: ours, a raw baseline or the memcpy ceiling. Latency fields are microseconds
 * ({@code NaN} when the source does not report them); {@code heapBytesPerOp} is {@code NaN} when not measured.
 *
 * @param level            {@code transport} (Connection messages), {@code transceiver} (big requests) or
 *                         {@code control} (one-block requests)
 * @param backend          transport name, or {@code host} for memcpy
 * @param impl             {@code ours}, {@code raw} or {@code memcpy}
 * @param source           what ran, in words
 * @param mode             {@code pull} / {@code push} for transceiver levels, {@code -} otherwise
 * @param checksums        {@code on} / {@code off} for transceiver levels, {@code -} otherwise
 * @param sizeBytes        message bytes (transport) or request bytes (transceiver levels)
 * @param blocks           blocks per request (transceiver levels), 0 otherwise
 * @param inflight         requests in flight (transceiver levels), 1 for transport messages, 0 for streaming
 *                         baselines
 * @param repeat           1-based repeat index
 * @param ops              messages or requests timed
 * @param bytes            bytes timed
 * @param nanos            elapsed time of the timed part
 * @param p50Us            median latency (round trip for messages, submit to completion for requests)
 * @param p99Us            99th percentile
 * @param p999Us           99.9th percentile
 * @param maxUs            maximum
 * @param heapBytesPerOp   heap allocated by all threads per op during the timed part
 * @param verifiedElements elements checked with KvPattern (0 without {@code --verify})
 * @param mismatches       elements that did not match
 * @param failures         ops that failed
 * @param note             anything the reader must know (empty when nothing)
 * @param stagedPerByte    the copy ledger: staging copies per byte delivered, both sides ({@code NaN} when not
 *                         counted: baselines, or a context in another JVM)
 * @param transportPerByte the transport's passes per byte delivered ({@code NaN} when not known)
 * @param checksumPerByte  checksum passes per byte delivered, both sides ({@code NaN} when not counted)
 */
public record Measurement(String level, String backend, String impl, String source, String mode, String checksums,
                          long sizeBytes, int blocks, int inflight, int repeat, long ops, long bytes, long nanos,
                          double p50Us, double p99Us, double p999Us, double maxUs, double heapBytesPerOp,
                          long verifiedElements, long mismatches, long failures, String note, double stagedPerByte,
                          double transportPerByte, double checksumPerByte) {
    /** A run without a copy ledger (baselines, transport messages, the control level). */
    public Measurement(String level, String backend, String impl, String source, String mode, String checksums,
                       long sizeBytes, int blocks, int inflight, int repeat, long ops, long bytes, long nanos,
                       double p50Us, double p99Us, double p999Us, double maxUs, double heapBytesPerOp,
                       long verifiedElements, long mismatches, long failures, String note) {
        this(level, backend, impl, source, mode, checksums, sizeBytes, blocks, inflight, repeat, ops, bytes, nanos,
                p50Us, p99Us, p999Us, maxUs, heapBytesPerOp, verifiedElements, mismatches, failures, note, Double.NaN,
                Double.NaN, Double.NaN);
    }

    /** Checks the names. */
    public Measurement {
        Objects.requireNonNull(level, "level");
        Objects.requireNonNull(backend, "backend");
        Objects.requireNonNull(impl, "impl");
        Objects.requireNonNull(source, "source");
        Objects.requireNonNull(mode, "mode");
        Objects.requireNonNull(checksums, "checksums");
        Objects.requireNonNull(note, "note");
    }

    /** @return copy passes per byte delivered (staging plus transport), {@code NaN} when either is unknown */
    public double copiesPerByte() {
        return stagedPerByte + transportPerByte;
    }

    /** @return GB/s (1e9 bytes per second), 0 when nothing was timed */
    public double gbps() {
        return nanos > 0 ? bytes / (double) nanos : 0;
    }

    /** @return messages or requests per second, 0 when nothing was timed */
    public double opsPerSecond() {
        return nanos > 0 ? ops / (nanos / 1e9) : 0;
    }

    /** @return the key of the configuration this run belongs to (everything but the repeat and the numbers) */
    public String configKey() {
        return level + "|" + backend + "|" + impl + "|" + mode + "|" + checksums + "|" + sizeBytes + "|" + blocks
                + "|" + inflight;
    }
}
