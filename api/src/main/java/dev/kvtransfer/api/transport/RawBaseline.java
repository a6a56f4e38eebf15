package dev.kvtransfer.api.transport;

import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;

/**
 * What a transport's own library does on the same kind of channel without kvtransfer's protocol on top: the
 * ceiling a benchmark compares the transport's {@link Connection} with (plain Aeron publication to subscription,
 * {@code ucp_tag_send} / {@code ucp_tag_recv}, {@code MPI_Send} / {@code MPI_Recv}, a raw socket loop for a TCP
 * plugin). Offered by {@link TransportProvider#rawBaseline()}.
 *
 * <p>A baseline runs both of its ends itself (two threads of this JVM, or a child process: the implementation
 * says which in {@link #describe}), on the channel the transport would pick for two endpoints created from
 * {@code config} on this host (e.g. shared memory when the config points at a shared driver). Payload bytes stay
 * off-heap. Every wait is bounded by the {@code timeout} given: when it passes, the call fails with a
 * {@link TransportException} ({@code TIMEOUT}) after stopping what it started. Calls are independent (nothing is
 * kept between them) and may be made from any one thread at a time.
 */
public interface RawBaseline {
    /**
     * @param config the settings the transport's endpoints would be created with
     * @return one line for the user: library, channel and how the two ends run (e.g. "plain Aeron, aeron:ipc
     *         exclusive publication to subscription, receiver and sender threads of this JVM")
     */
    String describe(TransportConfig config);

    /**
     * Streams {@code warmupMessages + messages} messages of {@code messageBytes} from one end to the other as fast
     * as the library allows, each landing (copied or received) in a destination buffer of that size, and times the
     * last {@code messages} (from the first byte after the warm-up to the last byte delivered).
     *
     * @param config         the transport's settings (channel kind, sizes)
     * @param messageBytes   bytes per message, at least 1
     * @param warmupMessages untimed messages first, at least 0
     * @param messages       timed messages, at least 1
     * @param timeout        bound on the whole call
     * @return the measurement
     * @throws TransportException {@code TIMEOUT} when the bound passes, {@code NETWORK} when the library fails
     */
    Throughput throughput(TransportConfig config, long messageBytes, long warmupMessages, long messages,
                          Duration timeout);

    /**
     * Round trips: one end sends a message of {@code messageBytes}, the other answers with a message of the same
     * size once it has received it whole; one in flight. The first {@code warmupSamples} are not kept.
     *
     * @param config        the transport's settings
     * @param messageBytes  bytes per message each way, at least 1
     * @param warmupSamples untimed round trips first, at least 0
     * @param samples       timed round trips, at least 1
     * @param timeout       bound on the whole call
     * @return one round-trip time per timed sample
     * @throws TransportException {@code TIMEOUT} when the bound passes, {@code NETWORK} when the library fails
     */
    Latency latency(TransportConfig config, long messageBytes, int warmupSamples, int samples, Duration timeout);

    /**
     * A throughput measurement.
     *
     * @param channel      what was measured (library and channel)
     * @param messageBytes bytes per message
     * @param messages     timed messages
     * @param nanos        elapsed time of the timed messages
     */
    record Throughput(String channel, long messageBytes, long messages, long nanos) {
        /** Checks the values. */
        public Throughput {
            Objects.requireNonNull(channel, "channel");
            if (messageBytes < 1 || messages < 1 || nanos < 1) {
                throw new IllegalArgumentException("messageBytes = " + messageBytes + ", messages = " + messages
                        + ", nanos = " + nanos + ": all must be positive");
            }
        }

        /** @return bytes timed */
        public long bytes() {
            return messageBytes * messages;
        }

        /** @return bytes per second */
        public double bytesPerSecond() {
            return bytes() / (nanos / 1e9);
        }

        /** @return messages per second */
        public double messagesPerSecond() {
            return messages / (nanos / 1e9);
        }
    }

    /**
     * Round-trip samples.
     *
     * @param channel        what was measured (library and channel)
     * @param messageBytes   bytes per message each way
     * @param roundTripNanos one round-trip time per sample (a copy is kept and returned)
     */
    record Latency(String channel, long messageBytes, long[] roundTripNanos) {
        /** Checks the values and copies the samples. */
        public Latency {
            Objects.requireNonNull(channel, "channel");
            Objects.requireNonNull(roundTripNanos, "roundTripNanos");
            if (messageBytes < 1 || roundTripNanos.length == 0) {
                throw new IllegalArgumentException("messageBytes = " + messageBytes + ", samples = "
                        + roundTripNanos.length + ": both must be positive");
            }
            roundTripNanos = roundTripNanos.clone();
        }

        /** @return a copy of the samples, in the order taken */
        @Override
        public long[] roundTripNanos() {
            return roundTripNanos.clone();
        }

        /**
         * @param percentile 0 .. 100
         * @return the sample at that percentile (nearest rank)
         */
        public long percentileNanos(double percentile) {
            if (!(percentile >= 0 && percentile <= 100)) {
                throw new IllegalArgumentException("percentile = " + percentile + ": must be in [0, 100]");
            }
            long[] s = roundTripNanos.clone();
            Arrays.sort(s);
            int rank = (int) Math.ceil(percentile / 100.0 * s.length);
            return s[Math.max(0, Math.min(s.length - 1, rank - 1))];
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Latency l && l.channel.equals(channel) && l.messageBytes == messageBytes
                    && Arrays.equals(l.roundTripNanos, roundTripNanos);
        }

        @Override
        public int hashCode() {
            return Objects.hash(channel, messageBytes, Arrays.hashCode(roundTripNanos));
        }

        @Override
        public String toString() {
            return "Latency[channel=" + channel + ", messageBytes=" + messageBytes + ", samples="
                    + roundTripNanos.length + "]";
        }
    }
}
