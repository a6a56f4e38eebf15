package dev.kvtransfer.api.transport;

import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The baseline SPI's records and the provider's default. */
class RawBaselineTest {
    @Test
    void throughputDerivesRates() {
        RawBaseline.Throughput t = new RawBaseline.Throughput("raw", 1000, 50, 1_000_000);
        assertThat(t.bytes()).isEqualTo(50_000);
        assertThat(t.bytesPerSecond()).isEqualTo(5e7); // 50 000 B in 1 ms
        assertThat(t.messagesPerSecond()).isEqualTo(5e4);
        assertThatThrownBy(() -> new RawBaseline.Throughput("raw", 0, 1, 1)).hasMessageContaining("positive");
    }

    @Test
    void latencyKeepsItsOwnCopyAndGivesNearestRankPercentiles() {
        long[] samples = {5, 1, 4, 2, 3, 6, 7, 8, 9, 10};
        RawBaseline.Latency l = new RawBaseline.Latency("raw", 64, samples);
        samples[0] = 1000;
        assertThat(l.roundTripNanos()).containsExactly(5, 1, 4, 2, 3, 6, 7, 8, 9, 10);
        l.roundTripNanos()[0] = 1000;
        assertThat(l.roundTripNanos()[0]).isEqualTo(5);
        assertThat(l.percentileNanos(50)).isEqualTo(5);
        assertThat(l.percentileNanos(99)).isEqualTo(10);
        assertThat(l.percentileNanos(0)).isEqualTo(1);
        assertThat(l).isEqualTo(new RawBaseline.Latency("raw", 64, new long[] {5, 1, 4, 2, 3, 6, 7, 8, 9, 10}));
        assertThatThrownBy(() -> l.percentileNanos(101)).hasMessageContaining("[0, 100]");
        assertThatThrownBy(() -> new RawBaseline.Latency("raw", 64, new long[0])).hasMessageContaining("positive");
    }

    @Test
    void providersOfferNoBaselineUnlessTheyOverrideIt() {
        TransportProvider p = new TransportProvider() {
            @Override
            public String name() {
                return "plain";
            }

            @Override
            public boolean isAvailable() {
                return true;
            }

            @Override
            public String unavailabilityCause() {
                return null;
            }

            @Override
            public Set<TransportCapability> capabilities() {
                return Set.of();
            }

            @Override
            public ConnectionManager create(TransportConfig config) {
                throw new UnsupportedOperationException("not needed");
            }
        };
        assertThat(p.rawBaseline()).isEmpty();
    }
}
