package dev.kvtransfer.bench;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A short bench over MPI: ours (endpoints of this process, a singleton MPI process) and the C {@code MPI_Send}
 * loop under {@code mpirun} in the same run, which must start even after this JVM initialized MPI. Needs Open MPI
 * (Debian libopenmpi-dev + openmpi-bin) and the mpi backend's JNI library; skipped, saying so, without them.
 */
class BenchMpiTest {
    @Test
    void mpiRunHasTheCLoopBesideOursAfterThisJvmInitializedMpi(@TempDir Path out) throws Exception {
        TransportProvider mpi = Plugins.discover().transport("mpi");
        assumeTrue(mpi.isAvailable(), () -> "mpi backend not available: " + mpi.unavailabilityCause());
        assumeTrue(MpiBaseline.find("mpicc", "mpirun") != null, "mpicc / mpirun not installed");

        BenchOutputs o = BenchOutputs.run(out, "--backend=mpi", "--level=transport", "--sizes=4k,256k",
                "--total=1m", "--latency-samples=20", "--verify", "--repeat=1", "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(1);
        assertThat(o.runs("transport", "ours")).hasSize(2);
        for (Map<String, String> ours : o.runs("transport", "ours")) {
            assertThat(BenchOutputs.num(ours, "verified_elements")).isPositive();
            assertThat(BenchOutputs.num(ours, "mismatches")).isZero();
            assertThat(o.runs("transport", "raw")).as("raw beside %s", ours).anySatisfy(r -> {
                assertThat(r.get("size_bytes")).isEqualTo(ours.get("size_bytes"));
                assertThat(r.get("source")).contains("MPI_Send");
            });
        }
        assertThat(o.stderr).doesNotContain("problem");
    }
}
