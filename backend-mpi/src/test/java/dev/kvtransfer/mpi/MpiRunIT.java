package dev.kvtransfer.mpi;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The real thing: {@link MpiCheckMain} under {@code mpirun -np 2} and {@code -np 4}; the job must exit 0 and
 * every rank must report every check passed.
 */
class MpiRunIT {
    @BeforeAll
    static void requireMpi() {
        assumeTrue(MpiLauncher.findMpirun() != null, "skipped: no mpirun on PATH (install openmpi-bin)");
        assumeTrue(new MpiTransportProvider().isAvailable(), "skipped: " + new MpiTransportProvider()
                .unavailabilityCause());
    }

    static void assertAllPassed(MpiJob job, int np, int checks) {
        assertThat(job.exitCode()).as("exit status of %s\n%s", job.command(), job.output()).isZero();
        for (int r = 0; r < np; r++) {
            assertThat(job.output()).as("rank %d summary in %s", r, job.log())
                    .contains("MPI-CHECKS rank=" + r + " size=" + np + " passed=" + checks + " failed=0");
        }
        assertThat(job.output()).doesNotContain("FAILED").doesNotContain("NOT APPLICABLE");
    }

    @Test
    @Timeout(120)
    void transportAndGroupChecksPassOnTwoRanks() throws Exception {
        MpiJob job = MpiJob.run("np2-transport-group", MpiJob.javaRanks(2)
                .args(List.of("--suite", "transport,group")).build(), 90);
        assertAllPassed(job, 2, TransportChecks.all().size() + GroupChecks.all().size());
    }

    @Test
    @Timeout(120)
    void transportAndGroupChecksPassOnFourRanks() throws Exception {
        MpiJob job = MpiJob.run("np4-transport-group", MpiJob.javaRanks(4)
                .args(List.of("--suite", "transport,group")).build(), 90);
        assertAllPassed(job, 4, TransportChecks.all().size() + GroupChecks.all().size());
        // pairs (0,1) and (2,3) ran concurrently, recvConnect took 3 senders, split made two groups of 2
        assertThat(job.output()).contains("[rank 3] CHECK recvConnect-returns-sender OK");
    }

    @Test
    @Timeout(150)
    void messageAboveTwoGibibytesIsChunkedAndExact() throws Exception {
        long available = memAvailableBytes();
        assumeTrue(available > 7L << 30, "skipped: the 2.5 GiB check needs two 2.5 GiB buffers and headroom;"
                + " MemAvailable is " + (available >> 20) + " MiB (needs > 7 GiB)");
        MpiJob job = MpiJob.run("np2-big", MpiJob.javaRanks(2).args(List.of("--suite", "big")).build(), 120);
        assertAllPassed(job, 2, BigChecks.all().size());
        assertThat(job.output()).contains("2.5 GiB message received");
    }

    static long memAvailableBytes() throws IOException {
        Path meminfo = Path.of("/proc/meminfo");
        if (!Files.exists(meminfo)) {
            return 0;
        }
        Matcher m = Pattern.compile("MemAvailable:\\s+(\\d+) kB").matcher(Files.readString(meminfo));
        return m.find() ? Long.parseLong(m.group(1)) * 1024 : 0;
    }
}
