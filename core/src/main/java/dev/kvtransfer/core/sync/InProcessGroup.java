package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.sync.GroupComm;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A group whose members are threads of this JVM (ranks of a {@code LocalInstance}). {@link #member(int)}
 * gives each rank its {@link GroupComm}. An allgather is a round: every member deposits its array; the last
 * one to arrive publishes the result and wakes the others. A member whose deadline passes withdraws its
 * deposit and fails with {@code TIMEOUT}, leaving the round open for the others (they fail on their own
 * deadlines); a member that closes fails every waiting member at once with {@code PEER_LOST}.
 */
public final class InProcessGroup {
    private final int size;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final Member[] members;
    private long[][] deposits;
    private int arrived;
    private long round;
    private List<long[]> lastResult = List.of();
    private String closedBy;

    /**
     * Creates a group.
     *
     * @param size number of members
     */
    public InProcessGroup(int size) {
        if (size < 1) {
            throw new IllegalArgumentException("size = " + size + ": must be >= 1");
        }
        this.size = size;
        this.deposits = new long[size][];
        this.members = new Member[size];
        for (int i = 0; i < size; i++) {
            members[i] = new Member(i);
        }
    }

    /** @return number of members */
    public int size() {
        return size;
    }

    /**
     * The comm of one member.
     *
     * @param rank member index
     * @return its comm (the same object on every call)
     */
    public GroupComm member(int rank) {
        Objects.checkIndex(rank, size);
        return members[rank];
    }

    private List<long[]> allgather(int rank, long[] values, Duration timeout) {
        Objects.requireNonNull(values, "values");
        Objects.requireNonNull(timeout, "timeout");
        long deadline = System.nanoTime() + Math.max(0, timeout.toNanos());
        lock.lock();
        try {
            checkOpen(rank);
            if (deposits[rank] != null) {
                throw new IllegalStateException("member " + rank + " is already in an allgather");
            }
            long myRound = round;
            deposits[rank] = values.clone();
            arrived++;
            if (arrived == size) {
                List<long[]> result = new ArrayList<>(size);
                for (long[] d : deposits) {
                    result.add(d);
                }
                lastResult = Collections.unmodifiableList(result);
                deposits = new long[size][];
                arrived = 0;
                round++;
                changed.signalAll();
                return copy(lastResult);
            }
            while (round == myRound) {
                if (closedBy != null) {
                    withdraw(rank);
                    throw new KvTransferException(ErrorCode.PEER_LOST, "allgather of member " + rank
                            + ": the group was left by " + closedBy);
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    int missing = size - arrived;
                    withdraw(rank);
                    throw new KvTransferException(ErrorCode.TIMEOUT, "allgather of member " + rank + ": "
                            + missing + " of " + size + " members did not arrive within " + timeout.toMillis()
                            + " ms");
                }
                try {
                    changed.awaitNanos(left);
                } catch (InterruptedException e) {
                    withdraw(rank);
                    Thread.currentThread().interrupt();
                    throw new KvTransferException(ErrorCode.INTERNAL, "allgather of member " + rank
                            + " interrupted");
                }
            }
            return copy(lastResult);
        } finally {
            lock.unlock();
        }
    }

    private void withdraw(int rank) {
        if (deposits[rank] != null) {
            deposits[rank] = null;
            arrived--;
        }
    }

    private static List<long[]> copy(List<long[]> in) {
        List<long[]> out = new ArrayList<>(in.size());
        for (long[] a : in) {
            out.add(a.clone());
        }
        return out;
    }

    private void checkOpen(int rank) {
        if (members[rank].closed) {
            throw new KvTransferException(ErrorCode.INTERNAL, "member " + rank + " has left the group");
        }
        if (closedBy != null) {
            throw new KvTransferException(ErrorCode.PEER_LOST, "the group was left by " + closedBy);
        }
    }

    private void leave(int rank) {
        lock.lock();
        try {
            members[rank].closed = true;
            if (closedBy == null) {
                closedBy = "member " + rank;
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String toString() {
        return "InProcessGroup{size=" + size + ", round=" + round + ", deposits=" + Arrays.stream(deposits)
                .filter(Objects::nonNull).count() + "}";
    }

    private final class Member implements GroupComm {
        private final int rank;
        private volatile boolean closed;

        Member(int rank) {
            this.rank = rank;
        }

        @Override
        public int rank() {
            return rank;
        }

        @Override
        public int size() {
            return size;
        }

        @Override
        public List<long[]> allgather(long[] values, Duration timeout) {
            return InProcessGroup.this.allgather(rank, values, timeout);
        }

        @Override
        public void close() {
            leave(rank);
        }
    }

}
