package dev.kvtransfer.cli;

import picocli.CommandLine;

import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * How the cli reports errors: one line on stderr ({@code kvtransfer: <what went wrong>}), the stack trace only with
 * {@code --verbose}. Installed by {@link KvTransferCli#commandLine()} as picocli's execution and parameter
 * exception handlers, and as the default handler of uncaught exceptions on background threads.
 */
public final class CliErrors {
    /** System property that turns on stack traces ({@code --verbose}); passed on to the JVMs the cli starts. */
    public static final String VERBOSE_PROPERTY = "kvtransfer.verbose";

    private static volatile boolean verbose = Boolean.getBoolean(VERBOSE_PROPERTY);

    private CliErrors() {
    }

    /** @return whether stack traces are printed */
    public static boolean verbose() {
        return verbose;
    }

    /**
     * Turns stack traces on or off (and the property child JVMs inherit).
     *
     * @param on {@code --verbose}
     */
    public static void verbose(boolean on) {
        verbose = on;
        if (on) {
            System.setProperty(VERBOSE_PROPERTY, "true");
        } else {
            System.clearProperty(VERBOSE_PROPERTY);
        }
    }

    /**
     * The failure as one line: the message of the outermost meaningful exception, followed by those of its causes
     * that add something, whitespace collapsed. Wrappers that only carry a cause (execution, completion,
     * invocation exceptions) are skipped.
     *
     * @param t the failure
     * @return e.g. {@code "transport 'ucx' is not available: libucp.so.0 missing ... (INTERNAL)"}
     */
    public static String oneLine(Throwable t) {
        StringBuilder b = new StringBuilder();
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        String code = null;
        for (Throwable c = t; c != null && seen.add(c); c = c.getCause()) {
            if (isWrapper(c) && c.getCause() != null) {
                continue;
            }
            String m = c.getMessage();
            if (c instanceof dev.kvtransfer.api.KvTransferException k) {
                if (code == null) {
                    code = k.code().name();
                }
                m = stripCode(m, k.code().name());
            }
            if (m == null || m.isBlank()) {
                m = c.getClass().getSimpleName();
            } else if (!selfExplanatory(c)) {
                m = c.getClass().getSimpleName() + ": " + m; // "NoSuchFileException: /x" says more than "/x"
            }
            if (b.length() > 0) {
                if (b.indexOf(m) >= 0) {
                    continue; // wrappers often repeat their cause's message
                }
                b.append(": ");
            }
            b.append(m);
        }
        String line = b.toString().replaceAll("\\s+", " ").trim();
        return code == null ? line : line + " (" + code + ")";
    }

    /** Our own exceptions and the JDK's argument / state ones read well without their type. */
    private static boolean selfExplanatory(Throwable c) {
        return c instanceof RuntimeException && (!c.getClass().getName().startsWith("java.")
                || c instanceof IllegalArgumentException || c instanceof IllegalStateException
                || c instanceof java.io.UncheckedIOException);
    }

    private static boolean isWrapper(Throwable c) {
        return c instanceof CommandLine.ExecutionException || c instanceof ExecutionException
                || c instanceof CompletionException || c instanceof InvocationTargetException
                || c instanceof java.lang.reflect.UndeclaredThrowableException
                || c.getClass() == RuntimeException.class && c.getCause() != null
                && String.valueOf(c.getMessage()).equals(String.valueOf(c.getCause()));
    }

    private static String stripCode(String m, String code) {
        String prefix = "[" + code + "] ";
        return m != null && m.startsWith(prefix) ? m.substring(prefix.length()) : m;
    }

    /**
     * Prints a failure: one line, plus the stack trace when verbose.
     *
     * @param err where
     * @param t   the failure
     */
    public static void print(PrintWriter err, Throwable t) {
        err.println("kvtransfer: " + oneLine(t) + (verbose ? "" : "  (--verbose for the stack trace)"));
        if (verbose) {
            t.printStackTrace(err);
        }
        err.flush();
    }

    /** picocli: a command threw. */
    static final class ExecutionHandler implements CommandLine.IExecutionExceptionHandler {
        @Override
        public int handleExecutionException(Exception ex, CommandLine cmd, CommandLine.ParseResult parsed) {
            print(cmd.getErr(), ex);
            CommandLine.IExitCodeExceptionMapper mapper = cmd.getExitCodeExceptionMapper();
            return mapper != null ? mapper.getExitCode(ex) : cmd.getCommandSpec().exitCodeOnExecutionException();
        }
    }

    /** picocli: the arguments did not parse. */
    static final class ParameterHandler implements CommandLine.IParameterExceptionHandler {
        @Override
        public int handleParseException(CommandLine.ParameterException ex, String[] args) {
            CommandLine cmd = ex.getCommandLine();
            PrintWriter err = cmd.getErr();
            String help = cmd.getCommandSpec().qualifiedName();
            if (ex instanceof CommandLine.UnmatchedArgumentException u && cmd.getParent() == null
                    && !u.getUnmatched().isEmpty() && !u.getUnmatched().get(0).startsWith("-")) {
                // The root's first word names no command: say that, not "unmatched argument at index 0".
                err.println("kvtransfer: unknown command '" + u.getUnmatched().get(0) + "' (commands: "
                        + String.join(", ", cmd.getSubcommands().keySet()) + "; see 'kvtransfer --help')");
            } else {
                err.println("kvtransfer: " + oneLine(ex) + " (see '" + help + " --help')");
            }
            if (verbose) {
                ex.printStackTrace(err);
            }
            err.flush();
            return cmd.getCommandSpec().exitCodeOnInvalidInput();
        }
    }

    /** Background threads: one line each, the trace when verbose. */
    static void installUncaughtHandler() {
        Thread.setDefaultUncaughtExceptionHandler((thread, e) -> {
            PrintWriter err = new PrintWriter(System.err, true);
            err.println("kvtransfer: thread " + thread.getName() + " died: " + oneLine(e)
                    + (verbose ? "" : "  (--verbose for the stack trace)"));
            if (verbose) {
                e.printStackTrace(err);
            }
            err.flush();
        });
    }
}
