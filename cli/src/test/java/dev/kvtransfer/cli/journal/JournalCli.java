package dev.kvtransfer.cli.journal;

import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;

/** Runs {@code kvtransfer journal ...} in this JVM and captures what it prints. */
final class JournalCli {
    private JournalCli() {
    }

    /**
     * Output and exit code of one command.
     *
     * @param code exit code
     * @param out  stdout
     * @param err  stderr
     */
    record Run(int code, String out, String err) {
    }

    static Run run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        CommandLine cl = new CommandLine(new JournalCommand());
        cl.setOut(new PrintWriter(out, true));
        cl.setErr(new PrintWriter(err, true));
        int code = cl.execute(args);
        return new Run(code, out.toString(), err.toString());
    }
}
