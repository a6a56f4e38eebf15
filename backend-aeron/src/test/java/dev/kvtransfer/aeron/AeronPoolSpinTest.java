package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/** The transceiver's request pools spin as long as this transport's agents: {@code aeron.spinMicros}. */
class AeronPoolSpinTest {
    @ParameterizedTest
    @CsvSource({"'', 100", "0, 0", "250, 250"})
    void poolsSpinAsLongAsTheAgents(String spinMicros, int expected) {
        TransportConfig.Builder b = TransportConfig.builder().name("pool-spin").defaultTimeout(Duration.ofSeconds(20));
        if (!spinMicros.isEmpty()) {
            b.property(AeronSettings.SPIN_MICROS, spinMicros);
        }
        try (ConnectionManager m = new AeronTransportProvider().create(b.build())) {
            assertThat(m.preferredPoolSpinMicros()).isEqualTo(expected);
        }
        assertThat(EmbeddedDriver.running()).as("embedded drivers left running").isZero();
    }
}
