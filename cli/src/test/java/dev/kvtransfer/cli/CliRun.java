package dev.kvtransfer.cli;

import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;

/** Runs the cli in this JVM for a test: exit code, what it printed on stdout and on stderr. */
final class CliRun {
    private CliRun() {
    }

    /**
     * @param args the command line
     * @return {exit code, stdout, stderr}
     */
    static String[] run(String... args) {
        StringWriter err = new StringWriter();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        PrintStream old = System.out;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        int code;
        try {
            CommandLine cl = KvTransferCli.commandLine();
            cl.setErr(new PrintWriter(err, true));
            code = cl.execute(args);
        } finally {
            System.setOut(old);
        }
        return new String[] {Integer.toString(code), out.toString(StandardCharsets.UTF_8), err.toString()};
    }
}
