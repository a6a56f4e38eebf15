package dev.kvtransfer.bench;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.RawBaseline;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.plugin.Plugins;

import java.util.Objects;
import java.util.Optional;

/**
 * Finds the raw library baseline for a backend: the transport's own {@link RawBaseline} when its provider offers
 * one ({@code TransportProvider.rawBaseline()}, e.g. plain Aeron on the same channel), else the tool the bench
 * knows for it ({@code ucx_perftest} for {@code ucx}, the C {@code MPI_Send} loop under {@code mpirun} for
 * {@code mpi}) when installed, else none, with the reason.
 */
public final class Baselines {
    private Baselines() {
    }

    /**
     * What {@link #find} found: the baseline, or why there is none.
     *
     * @param baseline the baseline (close it when done)
     * @param missing  why there is none (empty when there is one)
     */
    public record Found(Optional<Baseline> baseline, String missing) {
        /** Checks the values. */
        public Found {
            Objects.requireNonNull(baseline, "baseline");
            Objects.requireNonNull(missing, "missing");
        }
    }

    /**
     * With the default tool names ({@code ucx_perftest}, {@code mpicc}, {@code mpirun}).
     *
     * @param backend transport name
     * @param plugins discovered plugins
     * @param config  the settings the backend's endpoints are created with (the SPI baseline uses the same channel)
     * @return the baseline or why there is none
     */
    public static Found find(String backend, Plugins plugins, TransportConfig config) {
        return find(backend, plugins, config, "ucx_perftest", "mpicc", "mpirun");
    }

    /**
     * @param backend     transport name
     * @param plugins     discovered plugins
     * @param config      the settings the backend's endpoints are created with
     * @param ucxPerftest ucx_perftest program name or path
     * @param mpicc       MPI C compiler name or path
     * @param mpirun      MPI launcher name or path
     * @return the baseline or why there is none
     */
    public static Found find(String backend, Plugins plugins, TransportConfig config, String ucxPerftest,
            String mpicc, String mpirun) {
        Objects.requireNonNull(backend, "backend");
        Objects.requireNonNull(plugins, "plugins");
        Objects.requireNonNull(config, "config");
        Optional<RawBaseline> spi = Optional.empty();
        try {
            spi = plugins.transport(backend).rawBaseline();
        } catch (KvTransferException e) {
            // not installed here: the bench's own tools may still run
        }
        if (spi.isPresent()) {
            return new Found(Optional.of(new SpiBaseline(spi.get(), config)), "");
        }
        if (backend.equals("ucx")) {
            Baseline b = UcxPerftestBaseline.find(ucxPerftest);
            return b != null ? new Found(Optional.of(b), "")
                    : new Found(Optional.empty(), ucxPerftest + " not installed (Debian: ucx-utils)");
        }
        if (backend.equals("mpi")) {
            Baseline b = MpiBaseline.find(mpicc, mpirun);
            return b != null ? new Found(Optional.of(b), "")
                    : new Found(Optional.empty(), mpicc + " or " + mpirun + " not installed (Debian: libopenmpi-dev, "
                            + "openmpi-bin)");
        }
        return new Found(Optional.empty(), "the transport offers none through the SPI");
    }
}
