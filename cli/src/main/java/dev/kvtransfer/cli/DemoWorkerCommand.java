package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.local.LocalInstance;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.concurrent.Callable;

/**
 * The generation instance of {@code kvtransfer demo} in its own JVM: started by the demo, driven over the
 * {@link WorkerProtocol} on stdin/stdout.
 */
@Command(name = "demo-worker", hidden = true, description = "generation side of the demo (started by demo)")
public final class DemoWorkerCommand implements Callable<Integer> {
    @Mixin
    DemoOptions options = new DemoOptions();

    @Option(names = "--blocks-per-rank", required = true, description = "KV blocks per generation rank")
    int blocksPerRank;

    /** The demo passes its own {@code --metrics-port} plus one: this JVM serves the generation instance there. */
    @Mixin
    MetricsOptions metrics = new MetricsOptions();

    @Override
    public Integer call() throws IOException {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        // Nothing but protocol lines may reach stdout.
        System.setOut(System.err);
        // The endpoint's line would go to stdout; the demo prints where it is itself.
        try (MetricsOptions.Scope meters = metrics.start(new PrintStream(OutputStream.nullOutputStream()));
             LocalInstance gen = Instances.start("gen", options.generationState(), options, blocksPerRank,
                     meters.registry("gen"));
             GenRunner runner = new GenRunner(gen, options)) {
            Object lock = new Object();
            out.println(WorkerProtocol.READY);
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                String[] f = line.split(" ", -1);
                switch (f[0]) {
                    case WorkerProtocol.PREP: {
                        long id = Long.parseLong(f[2]);
                        String error = runner.prepare(Integer.parseInt(f[1]), id, Integer.parseInt(f[3]));
                        synchronized (lock) {
                            out.println(WorkerProtocol.PREPARED + " " + id + " " + WorkerProtocol.b64(error));
                        }
                        break;
                    }
                    case WorkerProtocol.REQ: {
                        int index = Integer.parseInt(f[1]);
                        long id = Long.parseLong(f[2]);
                        int isl = Integer.parseInt(f[3]);
                        ContextPhaseParams params = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(f[4]));
                        runner.submit(index, id, isl, params).whenComplete((t, e) -> {
                            String reply = e != null
                                    ? WorkerProtocol.DONE + " " + id + " 0 0 0 0 0 0 0 0 " + WorkerProtocol.b64(e.toString())
                                    : WorkerProtocol.DONE + " " + id + " " + (t.ok() ? 1 : 0) + " " + t.bytes() + " "
                                    + t.submitNanos() + " " + t.doneNanos() + " " + t.messages() + " "
                                    + t.reusedBlocks() + " " + t.skippedBytes() + " " + (t.pushed() ? 1 : 0) + " "
                                    + WorkerProtocol.b64(t.error());
                            synchronized (lock) {
                                out.println(reply);
                            }
                        });
                        break;
                    }
                    case WorkerProtocol.CHECK: {
                        GenSide.GenCheck c = runner.check(Long.parseLong(f[1]));
                        synchronized (lock) {
                            out.println(WorkerProtocol.CHECKED + " " + c.requestId() + " " + c.checked() + " "
                                    + c.mismatches() + " " + WorkerProtocol.b64(c.firstMismatch()));
                        }
                        break;
                    }
                    case WorkerProtocol.SYNC: {
                        String s = StatusSync.generation(gen, options.timeoutSeconds);
                        synchronized (lock) {
                            out.println(WorkerProtocol.SYNCED + " " + s);
                        }
                        break;
                    }
                    case WorkerProtocol.QUIT:
                        runner.close();
                        gen.close();
                        synchronized (lock) {
                            out.println(WorkerProtocol.BYE);
                        }
                        return 0;
                    default:
                        System.err.println("demo-worker: unknown command " + line);
                }
            }
        }
        // stdin closed: the parent is gone.
        return 3;
    }
}
