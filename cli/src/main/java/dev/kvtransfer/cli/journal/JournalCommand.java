package dev.kvtransfer.cli.journal;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** {@code kvtransfer journal}: read the transfer journals a run wrote ({@code --journal-dir}). */
@Command(name = "journal", mixinStandardHelpOptions = true,
        description = "Inspect or replay the transfer journals of a run (written with demo --journal-dir DIR).",
        subcommands = {JournalInspectCommand.class, JournalReplayCommand.class})
public final class JournalCommand implements Runnable {
    static {
        System.setProperty("chronicle.analytics.disable", "true");
    }

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }
}
