package dev.kvtransfer.cli;

import dev.kvtransfer.core.plugin.PluginDirectories;
import dev.kvtransfer.core.plugin.Plugins;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.ScopeType;

import java.io.File;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * The {@code kvtransfer} command. Global options (accepted before or after the subcommand): {@code --plugin-dir
 * DIR} adds a plugin directory (after the distribution's {@code plugins/}, see {@link Plugins}), {@code --verbose}
 * prints stack traces with errors. Every error is one line on stderr otherwise ({@link CliErrors}).
 */
@Command(name = "kvtransfer", mixinStandardHelpOptions = true, version = "kvtransfer 0.1.0",
        description = "KV-cache transfer for disaggregated LLM serving on the JVM.",
        subcommands = {DemoCommand.class, ServeCommand.class, RouteCommand.class, DemoWorkerCommand.class, MpiDemoRankCommand.class,
                dev.kvtransfer.cli.journal.JournalCommand.class, PluginsCommand.class,
                dev.kvtransfer.bench.BenchCommand.class})
public final class KvTransferCli implements Runnable {
    /** The plugin directories this JVM was started with (the launcher's), before any {@code --plugin-dir}. */
    private static final String STARTUP_PLUGIN_DIRS = System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY);

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Option(names = "--plugin-dir", paramLabel = "DIR", scope = ScopeType.INHERIT,
            description = "also load plugins from DIR (a directory of plugin directories, a plugin directory, or a "
                    + "plugin jar); repeatable")
    void pluginDirs(List<Path> dirs) {
        usePluginDirs(dirs);
    }

    @Option(names = "--verbose", scope = ScopeType.INHERIT, description = "print stack traces with errors")
    void verbose(boolean on) {
        if (on) {
            CliErrors.verbose(true);
        }
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    /**
     * Sets the plugin directories of this JVM (and of the JVMs it starts): those it was started with, then
     * {@code dirs}.
     *
     * @param dirs directories added by the command line
     */
    static void usePluginDirs(List<Path> dirs) {
        Set<String> all = new LinkedHashSet<>();
        for (Path p : PluginDirectories.parse(STARTUP_PLUGIN_DIRS)) {
            all.add(p.toString());
        }
        for (Path p : dirs) {
            all.add(p.toAbsolutePath().normalize().toString());
        }
        if (all.isEmpty()) {
            System.clearProperty(Plugins.PLUGIN_DIRS_PROPERTY);
        } else {
            System.setProperty(Plugins.PLUGIN_DIRS_PROPERTY, all.stream().collect(Collectors.joining(File.pathSeparator)));
        }
    }

    /**
     * The command line with the cli's error handling: one-line errors (stack traces with {@code --verbose}).
     *
     * @return a command line to {@link CommandLine#execute execute}
     */
    public static CommandLine commandLine() {
        CommandLine cl = new CommandLine(new KvTransferCli());
        cl.setExecutionExceptionHandler(new CliErrors.ExecutionHandler());
        cl.setParameterExceptionHandler(new CliErrors.ParameterHandler());
        return cl;
    }

    /**
     * Runs one command line with the cli's error handling in this JVM, with the global options reset first (tests
     * run many command lines in one JVM; the options of one must not leak into the next).
     *
     * @param args arguments
     * @return the exit status
     */
    public static int run(String... args) {
        usePluginDirs(new ArrayList<>());
        CliErrors.verbose(false);
        return commandLine().execute(args);
    }

    /**
     * Runs the command line.
     *
     * @param args arguments
     */
    public static void main(String[] args) {
        System.setProperty("chronicle.analytics.disable", "true");
        CliErrors.installUncaughtHandler();
        int code = commandLine().execute(args);
        System.exit(code);
    }
}
