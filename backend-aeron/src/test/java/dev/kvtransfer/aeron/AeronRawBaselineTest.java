package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.RawBaseline;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ServiceLoader;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link AeronRawBaseline} through the SPI: throughput and round trips over IPC (embedded and shared driver) and
 * UDP, bounded waits, nothing left running. No speed is asserted.
 */
class AeronRawBaselineTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    private static RawBaseline spi() {
        TransportProvider p = ServiceLoader.load(TransportProvider.class).stream().map(ServiceLoader.Provider::get)
                .filter(x -> x.name().equals("aeron")).findFirst().orElseThrow();
        return p.rawBaseline().orElseThrow();
    }

    @Test
    void ipcOnTheEmbeddedDriverMovesEveryMessageAndTimesRoundTrips() {
        int driversBefore = EmbeddedDriver.running();
        RawBaseline b = spi();
        TransportConfig c = TransportConfig.builder().build();
        assertThat(b.describe(c)).contains("aeron:ipc").contains("embedded");
        // Larger than a chunk (1 MiB) and not a multiple of it: several Aeron messages per message.
        RawBaseline.Throughput t = b.throughput(c, (1 << 20) + 12345, 2, 8, TIMEOUT);
        assertThat(t.messages()).isEqualTo(8);
        assertThat(t.bytes()).isEqualTo(8L * ((1 << 20) + 12345));
        assertThat(t.nanos()).isPositive();
        assertThat(t.channel()).contains("aeron:ipc");
        RawBaseline.Latency l = b.latency(c, 64, 10, 50, TIMEOUT);
        assertThat(l.roundTripNanos()).hasSize(50);
        assertThat(java.util.Arrays.stream(l.roundTripNanos()).min().orElseThrow()).isPositive();
        RawBaseline.Latency big = b.latency(c, 3 << 20, 1, 3, TIMEOUT);
        assertThat(big.roundTripNanos()).hasSize(3);
        assertThat(EmbeddedDriver.running()).as("the lease on the embedded driver is released").isEqualTo(driversBefore);
    }

    @Test
    void udpWhenIpcIsOff() {
        RawBaseline b = spi();
        TransportConfig c = TransportConfig.builder().property(AeronSettings.IPC, "false").build();
        assertThat(b.describe(c)).contains("aeron:udp to 127.0.0.1");
        RawBaseline.Throughput t = b.throughput(c, 4096, 10, 200, TIMEOUT);
        assertThat(t.channel()).contains("aeron:udp");
        assertThat(t.messages()).isEqualTo(200);
        assertThat(b.latency(c, 100_000, 2, 10, TIMEOUT).roundTripNanos()).hasSize(10);
    }

    @Test
    void ipcOnTheHostSupportsSharedDriver() {
        AeronTransportProvider p = new AeronTransportProvider();
        try (HostSupport host = p.startHostSupport(TransportConfig.builder().build())) {
            TransportConfig c = TransportConfig.builder().properties(host.properties()).build();
            RawBaseline b = p.rawBaseline().orElseThrow();
            assertThat(b.describe(c)).contains("the driver in " + host.properties().get(AeronSettings.DIR));
            assertThat(b.throughput(c, 65536, 4, 40, TIMEOUT).messages()).isEqualTo(40);
            assertThat(b.latency(c, 65536, 2, 10, TIMEOUT).roundTripNanos()).hasSize(10);
        }
    }

    @Test
    void aDeadlineThatPassesFailsTimeoutAndStopsTheSecondThread() {
        RawBaseline b = spi();
        TransportConfig c = TransportConfig.builder().build();
        assertThatThrownBy(() -> b.throughput(c, 64L << 20, 0, 1000, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT))
                .hasMessageContaining("aeron raw baseline");
        assertThat(Thread.getAllStackTraces().keySet().stream().map(Thread::getName))
                .doesNotContain("aeron-raw-sender");
    }

    @Test
    void argumentsAreChecked() {
        RawBaseline b = spi();
        TransportConfig c = TransportConfig.builder().build();
        assertThatThrownBy(() -> b.throughput(c, 0, 0, 1, TIMEOUT)).hasMessageContaining("messageBytes = 0");
        assertThatThrownBy(() -> b.latency(c, 64, 0, 0, TIMEOUT)).hasMessageContaining("samples = 0");
        assertThatThrownBy(() -> b.describe(TransportConfig.builder().property("aeron.bogus", "1").build()))
                .hasMessageContaining("aeron.bogus");
    }
}
