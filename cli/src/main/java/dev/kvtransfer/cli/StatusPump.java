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
import java.util.function.BiConsumer;

/**
 * The status checks of a long-running instance ({@code kvtransfer serve}): every few milliseconds every rank calls
 * its status check together (a collective per status group) with {@code atLeast = 0}, so finished requests leave
 * the transceivers (and time out there when no peer ever came) while new ones keep arriving; each rank's
 * finished ids go to a callback. The demo's {@link StatusSync} waits for a whole window instead.
 */
final class StatusPump implements AutoCloseable {
    private final LocalInstance instance;
    private final boolean context;
    private final BiConsumer<Integer, TransferStatus> onStatus;
    private final ExecutorService ranks;
    private final Thread loop;
    private volatile boolean running = true;

    /**
     * @param instance the instance
     * @param context  whether it is a context instance
     * @param periodMs pause between rounds
     * @param onStatus called with (rank, what it finished) after every round that finished something
     */
    StatusPump(LocalInstance instance, boolean context, long periodMs, BiConsumer<Integer, TransferStatus> onStatus) {
        this.instance = instance;
        this.context = context;
        this.onStatus = onStatus;
        this.ranks = Executors.newFixedThreadPool(instance.ranks(), r -> {
            Thread t = new Thread(r, "kvtransfer-status-" + instance.name());
            t.setDaemon(true);
            return t;
        });
        this.loop = new Thread(() -> run(periodMs), "kvtransfer-status-pump-" + instance.name());
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
            } catch (Exception e) {
                if (running) {
                    System.err.println("kvtransfer[" + instance.name() + "]: status check failed: "
                            + CliErrors.oneLine(e));
                }
            }
        }
    }

    private void round() throws Exception {
        List<Future<TransferStatus>> futures = new ArrayList<>();
        for (int r = 0; r < instance.ranks(); r++) {
            int rank = r;
            futures.add(ranks.submit(() -> context
                    ? instance.transceiver(rank).checkContextTransferStatus(OptionalInt.of(0))
                    : instance.transceiver(rank).checkGenTransferStatus(OptionalInt.of(0))));
        }
        for (int r = 0; r < futures.size(); r++) {
            TransferStatus s = futures.get(r).get(30, TimeUnit.SECONDS);
            if (!s.completed().isEmpty() || !s.failed().isEmpty()) {
                onStatus.accept(r, s);
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
        ranks.shutdownNow();
    }
}
