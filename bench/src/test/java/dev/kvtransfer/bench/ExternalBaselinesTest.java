package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The bench's own raw baselines for transports without one in the SPI, against the real tools. Each test needs the
 * tool installed (Debian ucx-utils; libopenmpi-dev + openmpi-bin) and is skipped, saying so, where it is not.
 */
class ExternalBaselinesTest {
    @Test
    void ucxPerftestRunsBothTestsAndReportsThroughputAndMedian() {
        UcxPerftestBaseline b = UcxPerftestBaseline.find("ucx_perftest");
        assumeTrue(b != null, "ucx_perftest is not installed (Debian: ucx-utils)");
        Baseline.Result r = b.measure(65536, 10, 100, 10, 100, Duration.ofSeconds(60));
        assertThat(r.messages()).isEqualTo(100);
        assertThat(r.nanos()).isPositive();
        assertThat(r.latency().p50Us()).isPositive();
        assertThat(r.latency().p99Us()).isNaN(); // perftest does not report it
    }

    @Test
    void mpiLoopIsCompiledAndRunUnderMpirun() {
        MpiBaseline b = MpiBaseline.find("mpicc", "mpirun");
        assumeTrue(b != null, "mpicc / mpirun are not installed (Debian: libopenmpi-dev, openmpi-bin)");
        try (b) {
            Baseline.Result r = b.measure(65536, 10, 100, 10, 50, Duration.ofSeconds(120));
            assertThat(r.messages()).isEqualTo(100);
            assertThat(r.nanos()).isPositive();
            assertThat(r.latency().p50Us()).isPositive();
            assertThat(r.latency().p50Us()).isLessThanOrEqualTo(r.latency().p99Us());
            assertThat(r.source()).contains("MPI_Send");
        }
    }

    @Test
    void missingToolsAreReportedAsMissing() {
        assertThat(UcxPerftestBaseline.find("no-such-ucx_perftest-here")).isNull();
        assertThat(MpiBaseline.find("no-such-mpicc", "mpirun")).isNull();
    }
}
