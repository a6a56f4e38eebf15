package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.sync.GroupComm;

import java.time.Duration;
import java.util.List;

/**
 * For a transport whose ranks are OS processes started by its own launcher (MPI's {@code mpirun}): how to start
 * them, and, inside a started process, which rank it is and how ranks form status groups. Tools (the cli, tests)
 * reach it only through {@link TransportProvider#launcher()}, so a new backend of this kind never touches them.
 */
public interface RankLauncher {
    /**
     * The command line that starts {@code processes} processes, each running {@code command}.
     *
     * @param processes number of processes (ranks)
     * @param command   what each process runs (e.g. a {@code java ...} command line)
     * @return the full command line (e.g. {@code mpirun -np N ... <command>})
     */
    List<String> command(int processes, List<String> command);

    /** @return this process's index among the launched processes, or -1 when it was not started by the launcher */
    int launchedRank();

    /** @return number of launched processes, or 0 when this process was not started by the launcher */
    int launchedSize();

    /**
     * Collectively (every launched process calls it in the same order) splits the launched processes into groups:
     * processes with the same {@code color} form one group, ordered by {@code key}.
     *
     * @param color   group selector
     * @param key     order inside the group
     * @param timeout deadline for the group's collectives
     * @return this process's group
     */
    GroupComm group(int color, int key, Duration timeout);
}
