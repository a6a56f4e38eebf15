package dev.kvtransfer.cli;

import dev.kvtransfer.core.plugin.Plugins;

import java.lang.management.ManagementFactory;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

/**
 * How the cli starts the JVMs of one run (the demo's generation process, {@code mpirun} ranks): with this JVM's
 * flags, its class path, and the plugin directories and {@code --verbose} as they are now (set by the command
 * line after this JVM started, so not among its input arguments), so every process finds the same plugins.
 */
public final class ChildJvms {
    private ChildJvms() {
    }

    /** @return this JVM's input arguments, with the current {@value Plugins#PLUGIN_DIRS_PROPERTY} and verbosity */
    public static List<String> flags() {
        String dirsFlag = "-D" + Plugins.PLUGIN_DIRS_PROPERTY + "=";
        String verboseFlag = "-D" + CliErrors.VERBOSE_PROPERTY + "=";
        List<String> out = new ArrayList<>();
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (!a.startsWith(dirsFlag) && !a.startsWith(verboseFlag)) {
                out.add(a);
            }
        }
        String dirs = System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY);
        if (dirs != null && !dirs.isBlank()) {
            out.add(dirsFlag + dirs);
        }
        if (CliErrors.verbose()) {
            out.add(verboseFlag + "true");
        }
        return out;
    }

    /** @return this JVM's {@code java} executable */
    public static String javaBinary() {
        return Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    }

    /**
     * The command line of a child JVM running a main class of this class path.
     *
     * @param mainClass the main class
     * @param args      its arguments
     * @return {@code java <flags> -cp <class path> <main> <args>}
     */
    public static List<String> javaCommand(String mainClass, List<String> args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(javaBinary());
        cmd.addAll(flags());
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(args);
        return cmd;
    }
}
