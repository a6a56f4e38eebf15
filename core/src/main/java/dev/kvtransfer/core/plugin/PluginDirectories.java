package dev.kvtransfer.core.plugin;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.MalformedURLException;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Finds the plugins of plugin directories and gives each one its {@link PluginClassLoader}.
 *
 * <p>A plugin directory given to kvtransfer ({@value Plugins#PLUGIN_DIRS_PROPERTY}, the cli's
 * {@code --plugin-dir}) is read as Trino reads its {@code plugin/} directory:
 * <ul>
 *   <li>each <b>subdirectory</b> holding jars is one plugin: its jars (the plugin and its own dependencies)
 *       share one class loader; the plugin's name is the subdirectory's name;</li>
 *   <li>a <b>jar directly inside</b> a directory that has plugin subdirectories is a plugin of its own (a
 *       third-party jar dropped next to the shipped plugins);</li>
 *   <li>a directory with jars and no subdirectory is itself <b>one plugin</b> (pointing at
 *       {@code plugins/backend-aeron} directly works);</li>
 *   <li>a path that is a jar is one plugin.</li>
 * </ul>
 *
 * <p>Class loaders are made once per JVM per set of jars and reused by every later discovery: a plugin's classes
 * (and their static state: an embedded media driver, a loaded JNI library — which the JVM lets only one class
 * loader load) exist once however often {@link Plugins#discover()} runs.
 */
public final class PluginDirectories {
    private static final Map<LoaderKey, PluginClassLoader> LOADERS = new ConcurrentHashMap<>();

    private record LoaderKey(ClassLoader api, List<Path> jars) {
    }

    private PluginDirectories() {
    }

    /**
     * One plugin found in a plugin directory.
     *
     * @param name     the plugin's name (subdirectory or jar name)
     * @param location the plugin's directory or jar
     * @param jars     its jars, sorted by name
     */
    public record Unit(String name, Path location, List<Path> jars) {
        /**
         * Validates and copies.
         *
         * @param name     the plugin's name
         * @param location its directory or jar
         * @param jars     its jars
         */
        public Unit {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(location, "location");
            jars = List.copyOf(jars);
        }
    }

    /**
     * The plugin directories named by a path list ({@link File#pathSeparator}-separated, blanks ignored).
     *
     * @param pathList e.g. {@code "/opt/kvtransfer/plugins:/home/me/plugins"}, or {@code null}
     * @return the directories in order
     */
    public static List<Path> parse(String pathList) {
        List<Path> out = new ArrayList<>();
        if (pathList == null) {
            return out;
        }
        for (String p : pathList.split(File.pathSeparator)) {
            if (!p.isBlank()) {
                out.add(Path.of(p.trim()));
            }
        }
        return out;
    }

    /**
     * Reads one plugin directory.
     *
     * @param root a plugin directory (or a jar)
     * @return its plugins, by name
     * @throws UncheckedIOException when it does not exist or cannot be read
     */
    public static List<Unit> scan(Path root) {
        Objects.requireNonNull(root, "root");
        Path abs = root.toAbsolutePath().normalize();
        if (Files.isRegularFile(abs) && isJar(abs)) {
            return List.of(new Unit(baseName(abs), abs, List.of(abs)));
        }
        if (!Files.isDirectory(abs)) {
            throw new UncheckedIOException(new IOException("plugin directory " + abs + " does not exist"));
        }
        List<Path> subdirs = list(abs).stream().filter(Files::isDirectory).collect(Collectors.toList());
        List<Path> looseJars = jarsIn(abs);
        List<Unit> units = new ArrayList<>();
        if (subdirs.isEmpty()) {
            if (!looseJars.isEmpty()) {
                units.add(new Unit(abs.getFileName() == null ? abs.toString() : abs.getFileName().toString(), abs,
                        looseJars));
            }
            return units;
        }
        for (Path d : subdirs) {
            List<Path> jars = jarsIn(d);
            if (!jars.isEmpty()) {
                units.add(new Unit(d.getFileName().toString(), d, jars));
            }
        }
        for (Path j : looseJars) {
            units.add(new Unit(baseName(j), j, List.of(j)));
        }
        units.sort((a, b) -> a.name().compareTo(b.name()));
        return units;
    }

    /**
     * The class loader of a plugin, made on first use and reused after.
     *
     * @param unit      the plugin
     * @param apiLoader the loader holding the api
     * @return its loader
     */
    public static PluginClassLoader loaderOf(Unit unit, ClassLoader apiLoader) {
        List<Path> key = new ArrayList<>();
        for (Path j : unit.jars()) {
            key.add(real(j));
        }
        Objects.requireNonNull(apiLoader, "apiLoader");
        return LOADERS.computeIfAbsent(new LoaderKey(apiLoader, List.copyOf(key)), k -> {
            List<URL> urls = new ArrayList<>();
            for (Path p : k.jars()) {
                try {
                    urls.add(p.toUri().toURL());
                } catch (MalformedURLException e) {
                    throw new IllegalArgumentException("jar " + p + ": " + e.getMessage(), e);
                }
            }
            return new PluginClassLoader(unit.name(), urls, apiLoader);
        });
    }

    private static Path real(Path p) {
        try {
            return p.toRealPath();
        } catch (IOException e) {
            return p.toAbsolutePath().normalize();
        }
    }

    private static List<Path> list(Path dir) {
        try (Stream<Path> s = Files.list(dir)) {
            return s.sorted().collect(Collectors.toList());
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read plugin directory " + dir + ": " + e.getMessage(), e);
        }
    }

    private static List<Path> jarsIn(Path dir) {
        return list(dir).stream().filter(p -> Files.isRegularFile(p) && isJar(p)).collect(Collectors.toList());
    }

    private static boolean isJar(Path p) {
        return p.getFileName().toString().endsWith(".jar");
    }

    private static String baseName(Path jar) {
        String n = jar.getFileName().toString();
        return n.endsWith(".jar") ? n.substring(0, n.length() - 4) : n;
    }
}
