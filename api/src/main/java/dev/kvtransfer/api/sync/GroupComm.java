package dev.kvtransfer.api.sync;

import java.time.Duration;
import java.util.List;

/**
 * Collective communication among the ranks of one group (e.g. the TP group of one PP stage), used to agree on
 * which requests every rank has finished. Each member calls {@link #allgather} in the same order.
 * Thread-safe only in the sense that one thread per member calls it at a time.
 */
public interface GroupComm extends AutoCloseable {
    /** @return this member's index in the group */
    int rank();

    /** @return number of members */
    int size();

    /**
     * Every member contributes an array; every member gets all arrays, indexed by member rank.
     *
     * @param values  this member's contribution
     * @param timeout how long to wait for the others
     * @return one array per member
     * @throws dev.kvtransfer.api.KvTransferException with {@code TIMEOUT} when members do not arrive in time
     */
    List<long[]> allgather(long[] values, Duration timeout);

    /** Leaves the group; later calls fail. */
    @Override
    void close();
}
