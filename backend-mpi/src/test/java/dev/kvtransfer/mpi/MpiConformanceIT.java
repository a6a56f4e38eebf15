package dev.kvtransfer.mpi;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The real rules inside real ranks: {@code mpirun -np N java ... MpiJUnitMain --class ...} runs the testkit's
 * {@code TransportConformanceTest} / {@code TransceiverConformanceTest} (through this module's short subclasses)
 * and {@link MpiCrossRankTest} with the JUnit Platform launcher in every rank. The job must exit 0 and every rank
 * must report its tests found and none failed; per-rank reports are {@code target/mpi-reports/<job>-rank-R.txt},
 * the job's output {@code target/mpi-reports/<job>.log}.
 */
class MpiConformanceIT {
    private static final Pattern SUMMARY = Pattern.compile(
            "MPI-JUNIT rank=(\\d+) size=(\\d+) found=(\\d+) succeeded=(\\d+) failed=(\\d+) aborted=(\\d+) skipped=(\\d+)");

    @BeforeAll
    static void requireMpi() {
        assumeTrue(MpiLauncher.findMpirun() != null, "skipped: no mpirun on PATH (install openmpi-bin)");
        assumeTrue(new MpiTransportProvider().isAvailable(), "skipped: " + new MpiTransportProvider()
                .unavailabilityCause());
    }

    static MpiJob junitJob(String name, int np, long timeoutSeconds, List<String> jvmFlags, Class<?>... classes)
            throws Exception {
        List<String> selectors = new ArrayList<>();
        for (Class<?> c : classes) {
            selectors.add("--class");
            selectors.add(c.getName());
        }
        return junitJob(name, np, timeoutSeconds, jvmFlags, selectors);
    }

    static MpiJob junitJob(String name, int np, long timeoutSeconds, List<String> jvmFlags, List<String> selectors)
            throws Exception {
        List<String> args = new ArrayList<>(List.of("--job", name, "--report-dir", MpiJob.reportDir().toString()));
        args.addAll(selectors);
        MpiJob job;
        try (OmpiServer server = OmpiServer.start(MpiJob.reportDir(), name)) {
            MpiLauncher launcher = MpiJob.javaRanks(np, MpiJUnitMain.class).jvmFlags(jvmFlags).args(args)
                    .sharedMemoryOnly(jvmFlags.contains("-Dmpi.test.sharedMemoryOnly=true"));
            server.mpirunFlags().forEach(launcher::mpiFlag);
            job = MpiJob.run(name, launcher.build(), timeoutSeconds);
        }
        assertThat(job.exitCode()).as("exit status of %s (reports: %s)\n%s", job.command(), job.log(),
                job.output()).isZero();
        Matcher m = SUMMARY.matcher(job.output());
        boolean[] seen = new boolean[np];
        while (m.find()) {
            int rank = Integer.parseInt(m.group(1));
            assertThat(Integer.parseInt(m.group(2))).isEqualTo(np);
            assertThat(Long.parseLong(m.group(3))).as("tests found on rank %d", rank).isPositive();
            assertThat(Long.parseLong(m.group(5))).as("tests failed on rank %d", rank).isZero();
            seen[rank] = true;
        }
        for (int r = 0; r < np; r++) {
            assertThat(seen[r]).as("summary of rank %d in %s", r, job.log()).isTrue();
        }
        return job;
    }

    /**
     * Both suites and the cross-rank tests in every rank of two. The suites' rules are single-process rules
     * (managers of one JVM talking to each other over MPI self), so each rank runs them on its own; rule 23's echo
     * child joins its rank's job through a link (MPI dynamic process management with the job's ompi-server).
     */
    @Test
    @Timeout(600)
    void transportAndTransceiverRulesAndCrossRankTestsPassInEveryRankOfTwo() throws Exception {
        MpiJob job = junitJob("np2-conformance", 2, 540, List.of(), MpiTransportConformanceTest.class,
                MpiTransceiverConformanceTest.class, MpiTransceiverFaultConformanceTest.class, MpiCrossRankTest.class);
        for (int r = 0; r < 2; r++) {
            assertThat(job.output()).contains("[rank " + r + "] SUCCESSFUL MpiTransportConformanceTest > "
                    + "required_spec1_23_crossProcessWhenDeclared");
        }
    }

    @Test
    @Timeout(300)
    void crossRankTestsPassOnFourRanks() throws Exception {
        // recvConnect takes 3 senders, split makes two groups of 2, three endpoints per rank talk all-to-all.
        // Shared memory only (as the demo's ranks): s01 checks that no rank listens on a socket then.
        junitJob("np4-cross-rank", 4, 240, List.of("-Dmpi.test.sharedMemoryOnly=true"), MpiCrossRankTest.class);
    }

    @Test
    @Timeout(300)
    void messageAboveTwoGibibytesIsChunkedAndExact() throws Exception {
        long available = memAvailableBytes();
        assumeTrue(available > 7L << 30, "skipped: the 2.5 GiB check needs two 2.5 GiB buffers and headroom;"
                + " MemAvailable is " + (available >> 20) + " MiB (needs > 7 GiB)");
        MpiJob job = junitJob("np2-big", 2, 240, List.of("-Dmpi.test.big=true"), List.of("--method",
                MpiCrossRankTest.class.getName() + "#z01_aMessageAboveTwoGibibytesIsChunkedAndExact"));
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
