package dev.kvtransfer.cli;

import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.local.LocalInstance;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * Runs the collective status checks on every rank of a {@link LocalInstance} at once (each rank's check
 * allgathers with its status group, so all members must call it together).
 */
final class StatusSync {
    private StatusSync() {
    }

    static String context(LocalInstance instance, int timeoutSeconds) {
        return run(instance, true, timeoutSeconds);
    }

    static String generation(LocalInstance instance, int timeoutSeconds) {
        return run(instance, false, timeoutSeconds);
    }

    private static String run(LocalInstance instance, boolean context, int timeoutSeconds) {
        ExecutorService pool = Executors.newFixedThreadPool(instance.ranks(), r -> {
            Thread t = new Thread(r, "status-sync");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<TransferStatus>> futures = new ArrayList<>();
            for (int r = 0; r < instance.ranks(); r++) {
                int rank = r;
                futures.add(pool.submit(() -> context
                        ? instance.transceiver(rank).checkContextTransferStatus(OptionalInt.empty())
                        : instance.transceiver(rank).checkGenTransferStatus(OptionalInt.empty())));
            }
            long completed = 0;
            long failed = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
            for (Future<TransferStatus> f : futures) {
                TransferStatus s = f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                completed += s.completed().size();
                failed += s.failed().size();
            }
            return completed + " " + failed;
        } catch (Exception e) {
            throw new IllegalStateException("status check failed: " + e, e);
        } finally {
            pool.shutdownNow();
        }
    }
}
