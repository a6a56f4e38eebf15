package dev.kvtransfer.cli;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;
import picocli.CommandLine.Command;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;

/**
 * {@code kvtransfer plugins}: every transport, formatter and memory plugin found (class path and plugin
 * directories), where from, available or not and why (with the package that fixes it where one is known), what
 * it can do, and the plugins that failed to load with their error.
 */
@Command(name = "plugins", mixinStandardHelpOptions = true,
        description = "List the transport, formatter and memory plugins found, where from, whether they can run "
                + "here and why not, and the plugins that failed to load.")
public final class PluginsCommand implements Callable<Integer> {
    @Override
    public Integer call() {
        print(Plugins.discover(), System.out);
        return 0;
    }

    /**
     * Writes the listing.
     *
     * @param p   what was found
     * @param out where
     */
    static void print(Plugins p, PrintStream out) {
        List<Path> dirs = p.pluginDirs();
        out.println("plugin directories: " + (dirs.isEmpty() ? "none (class path only)"
                : dirs.stream().map(d -> d.toAbsolutePath().normalize().toString())
                .collect(Collectors.joining(", "))));
        List<String[]> rows = new ArrayList<>();
        for (TransportProvider t : p.transports()) {
            boolean ok = Plugins.available(t);
            rows.add(new String[] {Plugins.safeName(t, TransportProvider::name),
                    ok ? "available" : "unavailable: " + withHint(t.getClass().getName(), Plugins.cause(t)),
                    capabilities(t), from(p, t)});
        }
        table(out, "transports", rows);
        rows = new ArrayList<>();
        for (FormatterProvider f : p.formatters()) {
            rows.add(new String[] {Plugins.safeName(f, FormatterProvider::name), "available",
                    "handles " + String.join(", ", Plugins.handled(f)), from(p, f)});
        }
        table(out, "formatters", rows);
        rows = new ArrayList<>();
        for (MemoryProvider m : p.memoryProviders()) {
            boolean ok = Plugins.available(m);
            rows.add(new String[] {Plugins.safeName(m, MemoryProvider::name),
                    ok ? "available" : "unavailable: " + withHint(m.getClass().getName(), Plugins.cause(m)),
                    join(Plugins.kinds(m)), from(p, m)});
        }
        table(out, "memory", rows);
        out.println();
        out.println("failed to load (" + p.failures().size() + ")" + (p.failures().isEmpty() ? ": none" : ""));
        for (Plugins.Failure f : p.failures()) {
            out.println("  " + shown(Path.of(f.where())) + ": " + f.error());
        }
        if (!p.shadowed().isEmpty()) {
            out.println();
            out.println("shadowed (" + p.shadowed().size() + ")");
            for (String s : p.shadowed()) {
                out.println("  " + s);
            }
        }
        out.flush();
    }

    private static void table(PrintStream out, String title, List<String[]> rows) {
        out.println();
        out.println(title + " (" + rows.size() + ")" + (rows.isEmpty() ? ": none" : ""));
        rows.sort((a, b) -> a[0].compareTo(b[0]));
        int[] w = new int[3];
        for (String[] r : rows) {
            for (int i = 0; i < w.length; i++) {
                w[i] = Math.max(w[i], Math.min(r[i].length(), i == 1 ? 24 : 60));
            }
        }
        for (String[] r : rows) {
            out.println(String.format(Locale.ROOT, "  %-" + w[0] + "s  %-" + w[1] + "s  %-" + w[2] + "s  from %s",
                    r[0], r[1], r[2], r[3]).stripTrailing());
        }
    }

    private static String capabilities(TransportProvider t) {
        try {
            Set<TransportCapability> caps = t.capabilities();
            return caps.isEmpty() ? "-" : join(caps);
        } catch (RuntimeException | LinkageError e) {
            return "capabilities() failed: " + e;
        }
    }

    private static String join(Collection<?> c) {
        if (c.isEmpty()) {
            return "-";
        }
        return new TreeSet<>(c.stream().map(String::valueOf).collect(Collectors.toList())).stream()
                .collect(Collectors.joining(","));
    }

    private static String from(Plugins p, Object provider) {
        Plugins.Source s = p.source(provider);
        if (s.classPath()) {
            return "class path" + (s.location() == null ? "" : " " + shown(s.location()));
        }
        if (s.jars().size() == 1 && s.jars().get(0).equals(s.location())) {
            return shown(s.location()); // a jar dropped into a plugin directory
        }
        return shown(s.location()) + " (" + s.jars().stream().map(j -> j.getFileName().toString())
                .collect(Collectors.joining(", ")) + ")";
    }

    /** A path relative to the distribution ({@code kvtransfer.home}) when inside it. */
    private static String shown(Path path) {
        String home = System.getProperty("kvtransfer.home");
        if (home != null && !home.isBlank()) {
            Path h = Path.of(home).toAbsolutePath().normalize();
            Path a = path.toAbsolutePath().normalize();
            if (a.startsWith(h) && !a.equals(h)) {
                return h.relativize(a).toString();
            }
        }
        return path.toString();
    }

    /**
     * An unavailability cause with what to install, when the cause names a library this project's plugins need
     * and does not say it already.
     *
     * @param providerClass the provider's class name
     * @param cause         its cause
     * @return the cause, maybe followed by {@code " — <what to do>"}
     */
    static String withHint(String providerClass, String cause) {
        String c = cause.toLowerCase(Locale.ROOT);
        if (c.contains("apt-get") || c.contains("apt install")) {
            return cause;
        }
        String hint = null;
        if (c.contains("libucp") || c.contains("libucs") || c.contains("jucx") || providerClass.contains(".ucx.")) {
            hint = "apt-get install libucx0";
        } else if (c.contains("libkvmpi") || c.contains("built without mpicc")) {
            hint = "apt-get install libopenmpi-dev openmpi-bin, then ./kvtransfer (it rebuilds the mpi plugin)";
        } else if (c.contains("libmpi") || providerClass.contains(".mpi.")) {
            hint = "apt-get install openmpi-bin libopenmpi-dev";
        } else if (c.contains("libcuda") || c.contains("cuda")) {
            hint = "needs an NVIDIA GPU and its driver (libcuda.so.1)";
        }
        return hint == null ? cause : cause + " — " + hint;
    }
}
