package dev.kvtransfer.cli;

import dev.kvtransfer.core.TransferStatus;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;

/**
 * Runs the status checks of a served instance's {@linkplain ServeRanks#local() local ranks} in the background, every
 * rank at once (they meet in their status groups), and hands what each finished to a callback. With all ranks in one
 * JVM ({@link ServeRanks#of}) it pumps them all; with {@code serve --rank R} each process pumps its own rank, and the
 * checks meet across processes in the ranks' {@code TransportGroupComm}s (each process calls its check in the same
 * order, so the rounds pair up).
 */
final class RankStatusPump implements AutoCloseable {
    private final ServeRanks ranks;
    private final boolean context;
    private final BiConsumer<Integer, TransferStatus> onStatus;
    private final java.util.function.Consumer<RuntimeException> onGroupLost;
    private final ExecutorService pool;
    private final Thread loop;
    private volatile boolean running = true;

    RankStatusPump(ServeRanks ranks, boolean context, long periodMs, BiConsumer<Integer, TransferStatus> onStatus) {
        this(ranks, context, periodMs, onStatus, null);
    }

    /**
     * @param onGroupLost called once, and the pump stops, when a status check fails because a member of a status
     *                    group is gone ({@code PEER_LOST}: with {@code serve --rank}, another rank's process died or
     *                    left); null: such failures are logged like any other
     */
    RankStatusPump(ServeRanks ranks, boolean context, long periodMs, BiConsumer<Integer, TransferStatus> onStatus,
                   java.util.function.Consumer<RuntimeException> onGroupLost) {
        this.onGroupLost = onGroupLost;
        this.ranks = ranks;
        this.context = context;
        this.onStatus = onStatus;
        this.pool = Executors.newFixedThreadPool(Math.max(1, ranks.local().size()), r -> {
            Thread t = new Thread(r, "kvtransfer-status-" + ranks.name());
            t.setDaemon(true);
            return t;
        });
        this.loop = new Thread(() -> run(periodMs), "kvtransfer-status-pump-" + ranks.name());
        loop.setDaemon(true);
        loop.start();
    }

    private void run(long periodMs) {
        while (running) {
            try {
                round();
                Thread.sleep(periodMs); // pacing of a background loop, not a wait for a condition
            } catch (InterruptedException e) {
                return;
            } catch (java.util.concurrent.ExecutionException e) {
                if (onGroupLost != null && e.getCause() instanceof dev.kvtransfer.api.KvTransferException k
                        && k.code() == dev.kvtransfer.api.ErrorCode.PEER_LOST) {
                    running = false;
                    onGroupLost.accept(k);
                    return;
                }
                if (running) {
                    System.err.println("kvtransfer[" + ranks.name() + "]: status check failed: "
                            + CliErrors.oneLine(e));
                }
            } catch (Exception e) {
                if (running) {
                    System.err.println("kvtransfer[" + ranks.name() + "]: status check failed: "
                            + CliErrors.oneLine(e));
                }
            }
        }
    }

    private void round() throws Exception {
        List<Future<TransferStatus>> futures = new ArrayList<>();
        for (int rank : ranks.local()) {
            futures.add(pool.submit(() -> context
                    ? ranks.transceiver(rank).checkContextTransferStatus(OptionalInt.of(0))
                    : ranks.transceiver(rank).checkGenTransferStatus(OptionalInt.of(0))));
        }
        for (int k = 0; k < futures.size(); k++) {
            TransferStatus s = futures.get(k).get(30, TimeUnit.SECONDS);
            if (!s.completed().isEmpty() || !s.failed().isEmpty()) {
                onStatus.accept(ranks.local().get(k), s);
            }
        }
    }

    @Override
    public void close() {
        running = false;
        loop.interrupt();
        try {
            loop.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        pool.shutdownNow();
    }
}
