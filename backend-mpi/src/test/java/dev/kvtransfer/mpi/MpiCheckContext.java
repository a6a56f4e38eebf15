package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/** What a {@link MpiCheck} gets: this rank's manager (re-creatable), a world group for barriers, and output. */
public final class MpiCheckContext {
    static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);

    private final MpiTransportProvider provider = new MpiTransportProvider();
    private final MpiGroupComm world;
    private ConnectionManager manager;

    MpiCheckContext(MpiGroupComm world) {
        this.world = world;
        this.manager = provider.create(config(Map.of()));
    }

    /** @return this rank's manager */
    public ConnectionManager manager() {
        return manager;
    }

    /** @return the provider */
    public MpiTransportProvider provider() {
        return provider;
    }

    /** @return the world rank */
    public int rank() {
        return world.rank();
    }

    /** @return the number of ranks */
    public int size() {
        return world.size();
    }

    /** @return the partner of the pairwise checks (rank ^ 1), or -1 for the odd one out */
    public int partner() {
        int p = rank() ^ 1;
        return p < size() ? p : -1;
    }

    /** @return the group of all ranks */
    public MpiGroupComm world() {
        return world;
    }

    /**
     * A transport config with extra properties and a short default timeout.
     *
     * @param properties transport properties
     * @return the config
     */
    public TransportConfig config(Map<String, String> properties) {
        return TransportConfig.builder().name("check-rank-" + MpiRuntime.get().worldRank())
                .defaultTimeout(Duration.ofSeconds(30)).properties(properties).build();
    }

    /**
     * Closes the current manager and opens a new one.
     *
     * @param properties transport properties of the new one
     * @return the new manager
     */
    public ConnectionManager reopen(Map<String, String> properties) {
        manager.close();
        manager = provider.create(config(properties));
        return manager;
    }

    /** Waits until every rank got here. */
    public void barrier() {
        world.allgather(new long[0], STEP_TIMEOUT);
    }

    /**
     * Every rank contributes values; all get all.
     *
     * @param values this rank's values
     * @return all ranks' values
     */
    public List<long[]> allgather(long... values) {
        return world.allgather(values, STEP_TIMEOUT);
    }

    /**
     * Prints one line prefixed with the rank.
     *
     * @param line the text
     */
    public void log(String line) {
        System.out.println("[rank " + rank() + "] " + line);
        System.out.flush();
    }

    void closeAll() {
        manager.close();
    }
}
