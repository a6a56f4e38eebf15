package dev.kvtransfer.mpi;

import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.RankLauncher;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The MPI transport's {@link RankLauncher} ({@link MpiTransportProvider#launcher()}): ranks are the processes of one
 * {@code mpirun} job, so a tool (the cli's {@code demo --backend mpi}) starts them and forms status groups without
 * importing this module.
 * <ul>
 *   <li>{@link #command}: {@code mpirun [--allow-run-as-root] --oversubscribe -np N --mca oob_tcp_if_include lo
 *       --mca btl_tcp_if_include lo --mca btl self,vader <command>} ({@link MpiLauncher}: mpirun from {@code -Dkvtransfer.mpirun} /
 *       {@code KVTRANSFER_MPIRUN} / the PATH; loopback only, as every launch of this project is one host);</li>
 *   <li>{@link #launchedRank()} / {@link #launchedSize()}: the world rank and size, from MPI when it is initialized,
 *       else from the variables {@code mpirun} gives its ranks ({@code OMPI_COMM_WORLD_RANK} / {@code _SIZE}),
 *       without initializing MPI; a process that only inherited them from a rank (a child JVM) answers -1 / 0;</li>
 *   <li>{@link #group}: {@link MpiGroupComm#split} (collective over the world; initializes MPI on first use).</li>
 * </ul>
 * Addresses: a rank's first manager is endpoint 0 of its process, so {@code CommState} addresses may be the bare
 * world ranks ({@code "3"}), which is what the demo builds.
 */
final class MpiRankLauncher implements RankLauncher {
    @Override
    public List<String> command(int processes, List<String> command) {
        if (processes < 1) {
            throw new IllegalArgumentException("processes = " + processes + ": must be >= 1");
        }
        Objects.requireNonNull(command, "command");
        if (command.isEmpty()) {
            throw new IllegalArgumentException("command is empty");
        }
        // One job whose ranks talk only to each other: shared memory only, so no rank listens on a socket.
        List<String> out = new ArrayList<>(MpiLauncher.builder().np(processes).sharedMemoryOnly(true).mpirunPrefix());
        for (String c : command) {
            out.add(Objects.requireNonNull(c, "command element"));
        }
        return List.copyOf(out);
    }

    @Override
    public int launchedRank() {
        if (MpiRuntime.isInitialized()) {
            MpiRuntime rt = MpiRuntime.get();
            return rt.detachedFromParentRank() ? -1 : rt.worldRank();
        }
        return launched() ? parse(System.getenv("OMPI_COMM_WORLD_RANK"), -1) : -1;
    }

    @Override
    public int launchedSize() {
        if (MpiRuntime.isInitialized()) {
            MpiRuntime rt = MpiRuntime.get();
            return rt.detachedFromParentRank() ? 0 : rt.worldSize();
        }
        return launched() ? parse(System.getenv("OMPI_COMM_WORLD_SIZE"), 0) : 0;
    }

    @Override
    public GroupComm group(int color, int key, Duration timeout) {
        return MpiGroupComm.split(color, key, timeout);
    }

    /** @return whether mpirun started this process (its variables are present and not merely inherited) */
    private static boolean launched() {
        if (System.getenv("OMPI_COMM_WORLD_RANK") == null) {
            return false;
        }
        return MpiNative.loadFailure() != null || !MpiNative.inheritedRankEnvironment();
    }

    private static int parse(String v, int dflt) {
        try {
            return v == null ? dflt : Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            return dflt;
        }
    }

    @Override
    public String toString() {
        return "MpiRankLauncher{" + String.join(" ", MpiLauncher.builder().np(1).mpirunPrefix()) + " ...}";
    }
}
