package dev.kvtransfer.soak;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The soak in small: about 12 s of requests over Aeron across four child JVMs, every fault kind at least once
 * (the soak does not stop issuing before each had its phase). No timing is asserted, only what must hold under
 * any load: requests served and verified, no hang, no wrong byte, every failure with an ErrorCode naming its own
 * request, both kills done, the report written.
 */
class SoakSmokeTest {
    @Test
    @Timeout(180) // a bound against a hang of the harness itself, far above its usual run
    void aShortAeronSoakWithEveryFaultServesVerifiesAndNeverHangs(@TempDir Path out) throws Exception {
        SoakOptions o = new SoakOptions("aeron", Duration.ofSeconds(12), Duration.ofMillis(1500), 4, 7, out,
                Duration.ofSeconds(2), Duration.ofSeconds(6), 16, List.of("-XX:TieredStopAtLevel=1"));
        SoakReport r = Soak.run(o);

        assertThat(r.served()).as("requests served and verified").isPositive();
        assertThat(r.bytesVerified()).isPositive();
        assertThat(r.hangs()).as("requests that did not end within deadline + grace").isEmpty();
        assertThat(r.verificationFailures()).as("requests completed with wrong bytes").isEmpty();
        assertThat(r.failures()).allSatisfy(f -> assertThat(f.named())
                .as("failure %s carries an ErrorCode and names its request", f).isTrue());
        @SuppressWarnings("unchecked")
        Map<String, Map<String, Object>> faults = (Map<String, Map<String, Object>>) (Map<?, ?>) r.json().get("faults");
        for (Soak.FaultKind k : Soak.FaultKind.values()) {
            assertThat((Integer) faults.get(k.name()).get("phases")).as("phases of %s", k).isPositive();
        }
        assertThat((List<?>) r.json().get("kills")).as("kills done").hasSize(2);
        @SuppressWarnings("unchecked")
        Map<String, Object> totals = (Map<String, Object>) r.json().get("totals");
        assertThat((Long) totals.get("cancelsSent")).as("cancels of the storm").isPositive();
        assertThat(out.resolve("report.md")).exists();
        assertThat(Files.readString(out.resolve("report.json"))).contains("\"served\"");
    }
}
