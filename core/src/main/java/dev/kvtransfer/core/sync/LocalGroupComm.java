package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.sync.GroupComm;

import java.time.Duration;
import java.util.List;
import java.util.Objects;

/** The group of one: a rank that agrees with nobody but itself (TP1 PP stages, single-rank instances). */
public final class LocalGroupComm implements GroupComm {
    private volatile boolean closed;

    @Override
    public int rank() {
        return 0;
    }

    @Override
    public int size() {
        return 1;
    }

    @Override
    public List<long[]> allgather(long[] values, Duration timeout) {
        Objects.requireNonNull(values, "values");
        if (closed) {
            throw new KvTransferException(ErrorCode.INTERNAL, "LocalGroupComm is closed");
        }
        return List.of(values.clone());
    }

    @Override
    public void close() {
        closed = true;
    }
}
