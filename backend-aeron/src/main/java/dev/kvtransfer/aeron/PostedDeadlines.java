package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportException;

import java.util.ArrayList;

/**
 * The deadlines of posted receives ({@code Connection.recvAsync}), enforced by whoever runs the agent's duty cycle:
 * nothing waits for a posted receive, so the agent expires it ({@link Matcher#expire}: TIMEOUT, withdrawn as a
 * blocking receive's caller withdraws its own, so nothing that has not begun to arrive is consumed). Agent only.
 *
 * <p>A plain list, not a heap: ended receives are dropped when it is scanned, which happens when the earliest
 * deadline is due or the list doubled since the last scan, so each receive is looked at O(1) times amortised and
 * 10,000 posted receives cost a scan per due deadline, not a tree per post.
 */
final class PostedDeadlines {
    private final ArrayList<Op> ops = new ArrayList<>();
    private long earliestNs;
    private int scanAt = 64;

    /** A posted receive the matcher did not end at once. */
    void track(Op op, Matcher matcher) {
        if (ops.isEmpty() || op.deadlineNs - earliestNs < 0) {
            earliestNs = op.deadlineNs;
        }
        ops.add(op);
        if (ops.size() >= scanAt) {
            scan(System.nanoTime(), matcher);
        }
    }

    /** @return how many expired (work done) */
    int expireDue(long now, Matcher matcher) {
        if (ops.isEmpty() || now - earliestNs < 0) {
            return 0;
        }
        return scan(now, matcher);
    }

    private int scan(long now, Matcher matcher) {
        int expired = 0;
        long earliest = 0;
        int kept = 0;
        for (int r = 0, n = ops.size(); r < n; r++) {
            Op op = ops.get(r);
            if (op.isFinal()) {
                continue;
            }
            if (now - op.deadlineNs >= 0) {
                matcher.expire(op); // calls its callback
                expired++;
                continue;
            }
            if (kept == 0 || op.deadlineNs - earliest < 0) {
                earliest = op.deadlineNs;
            }
            ops.set(kept++, op);
        }
        for (int i = ops.size() - 1; i >= kept; i--) {
            ops.remove(i);
        }
        earliestNs = earliest;
        scanAt = Math.max(64, 2 * kept);
        return expired;
    }

    /** The manager is gone: every posted receive still open fails (no effect on ended ones). */
    void failAll(TransportException why) {
        for (Op op : ops) {
            op.fail(why);
        }
        ops.clear();
    }

    /** @return posted receives tracked (ended ones may linger until the next scan) */
    int size() {
        return ops.size();
    }
}
