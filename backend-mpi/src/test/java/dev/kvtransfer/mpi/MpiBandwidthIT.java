package dev.kvtransfer.mpi;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Side by side, 16 MiB messages between 2 ranks: the plain C {@code MPI_Send}/{@code MPI_Recv} loop
 * ({@code target/mpi_bw}, built from {@code src/main/c/mpi_bw.c}) against our {@code Connection}
 * ({@link BandwidthMain}), {@value #ROUNDS} rounds each; the table (best and median GB/s, ratio,
 * the pml Open MPI selected) goes to stdout and {@code target/mpi-reports/bandwidth.md}. The C loop also runs
 * with the btl forced to {@code self,vader} and {@code self,tcp} to show which one the default used.
 * Asserted: every job exits 0, the Java receiver verified the bytes, every number parsed.
 */
class MpiBandwidthIT {
    static final int ROUNDS = 3;
    static final String BYTES = Long.toString(16L << 20);
    static final String ITERS = "50";
    static final String WARMUP = "10";
    private static final Pattern GBPS = Pattern.compile("_MPI_BW bytes=(\\d+) iters=(\\d+) seconds=\\S+ GBps=(\\S+)");

    @Test
    @Timeout(150)
    void javaConnectionAgainstPlainMpi() throws Exception {
        assumeTrue(MpiLauncher.findMpirun() != null, "skipped: no mpirun on PATH (install openmpi-bin)");
        assumeTrue(new MpiTransportProvider().isAvailable(), "skipped: "
                + new MpiTransportProvider().unavailabilityCause());
        Path bw = Path.of(System.getProperty("mpi.bw.binary", "target/mpi_bw"));
        assumeTrue(Files.isExecutable(bw), "skipped: " + bw + " was not built (needs mpicc)");
        double[] java = null;

        // C rounds around one Java job of ROUNDS rounds (one JVM start per rank, not one per round).
        double[] c = new double[ROUNDS];
        String pml = null;
        for (int i = 0; i < ROUNDS; i++) {
            MpiLauncher cLaunch = MpiLauncher.builder().np(2);
            if (i == 0) {
                cLaunch.mca("pml_base_verbose", "10");
            }
            List<String> cmd = new ArrayList<>(cLaunch.mpirunPrefix());
            cmd.addAll(List.of(bw.toString(), BYTES, ITERS, WARMUP));
            MpiJob cJob = MpiJob.run("bw-c-" + i, cmd, 60);
            assertThat(cJob.exitCode()).as(cJob.output()).isZero();
            c[i] = gbps(cJob.output()).get(0);
            if (i == 0) {
                Matcher m = Pattern.compile("select: component (\\w+) selected").matcher(cJob.output());
                assertThat(m.find()).as("pml_base_verbose names the pml: %s", cJob.output()).isTrue();
                pml = m.group(1);
                MpiJob jJob = MpiJob.run("bw-java", MpiJob.javaRanks(2, BandwidthMain.class)
                        .jvmFlag("-Dmpi.bw.bytes=" + BYTES).jvmFlag("-Dmpi.bw.iters=" + ITERS)
                        .jvmFlag("-Dmpi.bw.warmup=" + WARMUP).jvmFlag("-Dmpi.bw.rounds=" + ROUNDS).build(), 90);
                assertThat(jJob.exitCode()).as("exit status of %s\n%s", jJob.command(), jJob.output()).isZero();
                assertThat(jJob.output()).contains("BANDWIDTH-MAIN rank=0 status=0", "BANDWIDTH-MAIN rank=1 status=0");
                List<Double> j = gbps(jJob.output());
                assertThat(j).hasSize(ROUNDS);
                java = j.stream().mapToDouble(Double::doubleValue).toArray();
            }
        }
        double vader = forcedBtl(bw, "self,vader");
        double tcp = forcedBtl(bw, "self,tcp");

        double cBest = Arrays.stream(c).max().orElseThrow();
        double jBest = Arrays.stream(java).max().orElseThrow();
        double cMed = median(c);
        double jMed = median(java);
        String table = String.format(Locale.ROOT, """
                | 16 MiB messages, 2 ranks, %s iterations | best GB/s | median GB/s |
                | --- | ---: | ---: |
                | C MPI_Send/MPI_Recv (target/mpi_bw) | %.2f | %.2f |
                | Java Connection (backend-mpi) | %.2f | %.2f |
                | ratio Java / C | %.2f | %.2f |
                | C, --mca btl self,vader | %.2f | |
                | C, --mca btl self,tcp | %.2f | |

                pml selected: %s; rounds: C %s, Java %s
                """, ITERS, cBest, cMed, jBest, jMed, jBest / cBest, jMed / cMed, vader, tcp, pml,
                Arrays.toString(c), Arrays.toString(java));
        System.out.println(table);
        Files.writeString(MpiJob.reportDir().resolve("bandwidth.md"), table);
        assertThat(cBest).isPositive();
        assertThat(jBest).isPositive();
    }

    private static double forcedBtl(Path bw, String btl) throws Exception {
        List<String> cmd = new ArrayList<>(MpiLauncher.builder().np(2).mca("btl", btl).mpirunPrefix());
        cmd.addAll(List.of(bw.toString(), BYTES, ITERS, WARMUP));
        MpiJob job = MpiJob.run("bw-c-" + btl.replace(',', '-'), cmd, 60);
        assertThat(job.exitCode()).as(job.output()).isZero();
        return gbps(job.output()).get(0);
    }

    static List<Double> gbps(String output) {
        Matcher m = GBPS.matcher(output);
        List<Double> all = new ArrayList<>();
        while (m.find()) {
            all.add(Double.parseDouble(m.group(3)));
        }
        assertThat(all).as("bandwidth lines in %s", output).isNotEmpty();
        return all;
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s[s.length / 2];
    }
}
