package dev.kvtransfer.ucx;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** The bench runs end to end across two JVMs (small sizes, two streams, without ucx_perftest) and verifies its bytes. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxBenchTest {
    @Test
    void benchMovesAndVerifiesBytesBetweenTwoJvms() throws Exception {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        int rc;
        try (PrintStream out = new PrintStream(buf, true, StandardCharsets.UTF_8)) {
            rc = UcxBench.run(out, "--sizes", "64k,1m", "--bytes", "8m", "--warmup", "1", "--no-perftest", "--runs",
                    "1", "--streams", "2", "--lat-iters", "200");
        }
        String text = buf.toString(StandardCharsets.UTF_8);
        assertThat(rc).as(text).isZero();
        assertThat(text).contains("| 64 KiB |").contains("| 1 MiB |").contains("8 B round trip")
                .contains("all transfers verified");
    }
}
