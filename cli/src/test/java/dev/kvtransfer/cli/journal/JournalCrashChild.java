package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;

/**
 * The process {@link KilledSenderJournalTest} kills: a context and a generation instance journaling under
 * {@code args[0]}; request 1 (one block) completes, then requests 2 and 3 (256 blocks each, sent in 4 KiB
 * messages that each take 20 ms more) are submitted and are still moving when the test destroys this JVM.
 * Prints {@code COMPLETED 1} and {@code SUBMITTED} on stdout.
 */
public final class JournalCrashChild {
    private JournalCrashChild() {
    }

    /**
     * @param args journal directory
     * @throws Exception when the first request fails
     */
    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        TransceiverConfig cfg = JournalRun.config(dir, true, 4096);
        // Every payload send (data tags, more than the 1-byte ready signal) takes 20 ms longer, so a transfer is
        // reliably still moving when the test kills this process.
        FaultyTransportProvider slow = new FaultyTransportProvider(new LoopbackTransportProvider(),
                new Faults().inject(Fault.delay(Duration.ofMillis(20), Fault.dataOfAtLeast(2))));
        LocalInstance ctx = JournalRun.start("ctx", JournalRun.CTX, slow, "crash", cfg, 1024);
        LocalInstance gen = JournalRun.start("gen", JournalRun.GEN, slow, "crash", cfg, 1024);
        JournalRun.awaitAndVerify(ctx, gen, JournalRun.submit(ctx, gen, 1, 16));
        System.out.println("COMPLETED 1");
        JournalRun.submit(ctx, gen, 2, 4096);
        JournalRun.submit(ctx, gen, 3, 4096);
        System.out.println("SUBMITTED");
        System.out.flush();
        // Wait to be killed; exit on our own (status 3) if the test never does.
        long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
        while (System.nanoTime() < deadline) {
            LockSupport.parkNanos(Duration.ofSeconds(1).toNanos());
        }
        System.exit(3);
    }
}
