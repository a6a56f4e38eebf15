package dev.kvtransfer.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code kvtransfer} command. */
@Command(name = "kvtransfer", mixinStandardHelpOptions = true, version = "kvtransfer 0.1.0",
        description = "KV-cache transfer for disaggregated LLM serving on the JVM.",
        subcommands = {DemoCommand.class, DemoWorkerCommand.class, MpiDemoRankCommand.class, dev.kvtransfer.cli.journal.JournalCommand.class, dev.kvtransfer.bench.BenchCommand.class})
public final class KvTransferCli implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    /**
     * Runs the command line.
     *
     * @param args arguments
     */
    public static void main(String[] args) {
        System.setProperty("chronicle.analytics.disable", "true");
        int code = new CommandLine(new KvTransferCli()).execute(args);
        System.exit(code);
    }
}
