package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * 64 ranks over Aeron in one JVM: a context instance of TP16 x PP2 and a generation instance of
 * TP8 x PP4 — the shape whose first contact failed every warm-up request with PEER_LOST — as
 * {@code LocalInstance}s, every rank its own manager. The first round of requests meets the set-up of every
 * connection; every request must complete on both sides and every element must hold the pattern, over IPC (the
 * default in one process) and over UDP (the path between processes).
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class ManyRanksTest {
    @ParameterizedTest(name = "aeron.ipc={0}")
    @ValueSource(strings = {"true", "false"})
    void sixtyFourRanksTransferVerifiedKvFromTheFirstContactOn(String ipc) {
        TransportConfig transport = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(60))
                .property(AeronSettings.IPC, ipc).property(AeronSettings.TERM_LENGTH, String.valueOf(1 << 20))
                .build();
        try (ManyRanks m = new ManyRanks(8, 16, 16, 16, 16, 2, 8, 4, transport, 32)) {
            assertThat(m.ctx.ranks() + m.gen.ranks()).isEqualTo(64);
            for (int round = 0; round < 2; round++) {
                ManyRanks.Round r = m.round(4, 64, Duration.ofSeconds(90));
                System.out.printf("64 ranks, aeron.ipc=%s, round %d: %d requests in %d ms (start-up %d ms), %d elements"
                        + " verified%n", ipc, round, r.requests(), r.millis(), m.startMs, r.elements());
                if (!r.failures().isEmpty()) {
                    AeronRuntime.driverCounters().forEach(System.out::println);
                }
                assertThat(r.failures()).as("round %d", round).isEmpty();
                assertThat(r.elements()).isPositive();
            }
            assertThat(m.errors).as("background errors").isEmpty();
        }
    }
}
