package dev.kvtransfer.core.transfer;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * Control leases still out with posted receives. Those receives end when the transport closes, their callbacks on
 * its threads, so the leases come back just after; a closing receiver waits for them (bounded) before its control
 * buffers and the instance's memory go.
 */
final class LeaseCount {
    private int out;

    synchronized void up() {
        out++;
    }

    synchronized void down() {
        if (--out == 0) {
            notifyAll();
        }
    }

    /**
     * @param timeout the longest wait
     * @return whether every lease came back
     */
    synchronized boolean awaitZero(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (out > 0) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                return false;
            }
            try {
                TimeUnit.NANOSECONDS.timedWait(this, left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return true;
    }
}
