package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.transport.TransportProvider;

import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Collectors;

/**
 * Finds the transport, formatter and memory plugins and selects them by name: on the class path
 * ({@link ServiceLoader} of a class loader, as tests and embedding engines use it) and in plugin directories
 * (each plugin with its own {@link PluginClassLoader}, see {@link PluginDirectories} for the layout).
 *
 * <p>A missing, unavailable or broken plugin fails with a message listing what <em>was</em> found and, for
 * unavailable ones, why ({@code "transport 'ucx' is not available: libucp missing; found: aeron (available),
 * loopback (available)"}). Discovery happens once, in the constructor; a plugin whose provider fails to load is
 * remembered with its error ({@link #failures()}) instead of aborting discovery. When two plugins offer the same
 * name, the first found wins (class path first, then the plugin directories in order) and the other is listed in
 * {@link #shadowed()}.
 */
public final class Plugins {
    /**
     * System property with the plugin directories {@link #discover()} reads ({@link java.io.File#pathSeparator}
     * separated). The launcher sets it to the distribution's {@code plugins/}; the cli's {@code --plugin-dir} adds
     * to it and passes it on to the JVMs it starts.
     */
    public static final String PLUGIN_DIRS_PROPERTY = "kvtransfer.plugin.dirs";

    /** What {@link #source} says for a provider handed in by the caller. */
    public static final String EXPLICIT = "given explicitly";

    /**
     * Where a provider came from.
     *
     * @param plugin   the plugin's name (its directory or jar), or {@code "class path"}
     * @param location the plugin directory or jar, or the class-path entry holding the provider class (may be
     *                 {@code null} when unknown)
     * @param jars     the plugin's jars (empty for the class path)
     */
    public record Source(String plugin, Path location, List<Path> jars) {
        /**
         * Validates and copies.
         *
         * @param plugin   the plugin's name
         * @param location where it is
         * @param jars     its jars
         */
        public Source {
            Objects.requireNonNull(plugin, "plugin");
            jars = List.copyOf(jars);
        }

        /** @return whether the provider came from the class path (not from a plugin directory) */
        public boolean classPath() {
            return jars.isEmpty();
        }

        /** @return e.g. {@code "plugins/backend-aeron (2 jars)"} or {@code "class path (lib/kvtransfer-testkit.jar)"} */
        public String describe() {
            if (classPath()) {
                return plugin + (location == null ? "" : " (" + location + ")");
            }
            return location + " (" + jars.size() + (jars.size() == 1 ? " jar" : " jars") + ")";
        }
    }

    /**
     * A plugin (or one of its providers) that could not be loaded.
     *
     * @param where the plugin directory, jar or {@code "class path"}
     * @param error what went wrong, one line
     */
    public record Failure(String where, String error) {
        @Override
        public String toString() {
            return where + ": " + error;
        }
    }

    private final List<TransportProvider> transports;
    private final List<FormatterProvider> formatters;
    private final List<MemoryProvider> memories;
    private final List<Failure> failures;
    private final List<String> shadowed;
    private final List<Path> pluginDirs;
    private final Map<Object, Source> sources;

    /**
     * Discovers plugins on a class loader only (no plugin directory).
     *
     * @param loader where to look
     */
    public Plugins(ClassLoader loader) {
        this(Objects.requireNonNull(loader, "loader"), List.of());
    }

    /**
     * Uses explicit providers (tests, or engines that wire plugins themselves).
     *
     * @param transports transport providers
     * @param formatters formatter providers
     */
    public Plugins(List<TransportProvider> transports, List<FormatterProvider> formatters) {
        this(transports, formatters, List.of());
    }

    /**
     * Uses explicit providers (tests, or engines that wire plugins themselves).
     *
     * @param transports transport providers
     * @param formatters formatter providers
     * @param memories   memory providers
     */
    public Plugins(List<TransportProvider> transports, List<FormatterProvider> formatters,
                   List<MemoryProvider> memories) {
        this.transports = List.copyOf(transports);
        this.formatters = List.copyOf(formatters);
        this.memories = List.copyOf(memories);
        this.failures = List.of();
        this.shadowed = List.of();
        this.pluginDirs = List.of();
        this.sources = new IdentityHashMap<>();
        for (Object p : concat(this.transports, this.formatters, this.memories)) {
            sources.put(p, new Source(EXPLICIT, null, List.of()));
        }
    }

    /**
     * Discovers plugins on a class loader and in plugin directories.
     *
     * @param loader     the class path to search ({@link ServiceLoader}); also the loader that holds the api the
     *                   plugin class loaders share
     * @param pluginDirs plugin directories, searched after the class path, in order
     */
    public Plugins(ClassLoader loader, List<Path> pluginDirs) {
        Objects.requireNonNull(loader, "loader");
        this.pluginDirs = List.copyOf(pluginDirs);
        this.sources = new IdentityHashMap<>();
        List<Failure> bad = new ArrayList<>();
        Finder finder = new Finder(bad);
        Source classPath = new Source("class path", null, List.of());
        finder.load(loader, classPath, true);
        ClassLoader apiLoader = TransportProvider.class.getClassLoader();
        for (Path dir : this.pluginDirs) {
            List<PluginDirectories.Unit> units;
            try {
                units = PluginDirectories.scan(dir);
            } catch (UncheckedIOException e) {
                Throwable c = e.getCause() != null ? e.getCause() : e;
                bad.add(new Failure(dir.toString(), c.getMessage() != null ? c.getMessage() : oneLine(c)));
                continue;
            }
            for (PluginDirectories.Unit u : units) {
                Source s = new Source(u.name(), u.location(), u.jars());
                PluginClassLoader pl;
                try {
                    pl = PluginDirectories.loaderOf(u, apiLoader);
                } catch (RuntimeException e) {
                    bad.add(new Failure(u.location().toString(), oneLine(e)));
                    continue;
                }
                int failuresBefore = bad.size();
                if (finder.load(pl, s, false) == 0 && bad.size() == failuresBefore) {
                    bad.add(new Failure(u.location().toString(), "no provider: none of its jars registers one in "
                            + "META-INF/services/dev.kvtransfer.api.{transport.TransportProvider,"
                            + "format.FormatterProvider,memory.MemoryProvider}"));
                }
            }
        }
        this.transports = List.copyOf(finder.transports.values());
        this.formatters = List.copyOf(finder.formatters.values());
        this.memories = List.copyOf(finder.memories.values());
        this.failures = List.copyOf(bad);
        this.shadowed = List.copyOf(finder.shadowed);
        this.sources.putAll(finder.sources);
    }

    /**
     * The plugins on the thread's context class loader (or this class's loader) plus those of the plugin
     * directories named by {@value #PLUGIN_DIRS_PROPERTY} (none when the property is unset: then exactly the class
     * path, as tests and embedding engines use it).
     *
     * @return what was found
     */
    public static Plugins discover() {
        return discover(PluginDirectories.parse(System.getProperty(PLUGIN_DIRS_PROPERTY)));
    }

    /**
     * The plugins on the thread's context class loader (or this class's loader) plus those of some plugin
     * directories.
     *
     * @param pluginDirs plugin directories, searched after the class path
     * @return what was found
     */
    public static Plugins discover(List<Path> pluginDirs) {
        ClassLoader cl = Thread.currentThread().getContextClassLoader();
        return new Plugins(cl != null ? cl : Plugins.class.getClassLoader(), pluginDirs);
    }

    /** Collects providers in discovery order, first name wins. */
    private static final class Finder {
        final Map<String, TransportProvider> transports = new LinkedHashMap<>();
        final Map<String, FormatterProvider> formatters = new LinkedHashMap<>();
        final Map<String, MemoryProvider> memories = new LinkedHashMap<>();
        final Map<Object, Source> sources = new IdentityHashMap<>();
        final List<String> shadowed = new ArrayList<>();
        final List<Failure> bad;

        Finder(List<Failure> bad) {
            this.bad = bad;
        }

        /** @return how many providers this loader defined (whether or not shadowed) */
        int load(ClassLoader loader, Source source, boolean classPath) {
            int n = 0;
            n += load(TransportProvider.class, "transport", loader, source, classPath, transports,
                    TransportProvider::name);
            n += load(FormatterProvider.class, "formatter", loader, source, classPath, formatters,
                    FormatterProvider::name);
            n += load(MemoryProvider.class, "memory provider", loader, source, classPath, memories,
                    MemoryProvider::name);
            return n;
        }

        private <T> int load(Class<T> type, String kind, ClassLoader loader, Source source, boolean classPath,
                             Map<String, T> into, Function<T, String> name) {
            int n = 0;
            Iterator<T> it = ServiceLoader.load(type, loader).iterator();
            while (true) {
                T p;
                try {
                    if (!it.hasNext()) {
                        break;
                    }
                    p = it.next();
                } catch (ServiceConfigurationError | LinkageError e) {
                    bad.add(new Failure(classPath ? "class path" : source.location().toString(),
                            type.getSimpleName() + ": " + oneLine(e)));
                    if (e instanceof LinkageError) {
                        break; // the iterator's state is unknown after an error it did not wrap
                    }
                    continue;
                }
                Source s = classPath ? classPathSource(p) : source;
                n++;
                String key = safeName(p, name);
                T first = into.get(key);
                if (first != null) {
                    if (first.getClass() != p.getClass() || sources.get(first).classPath() != s.classPath()
                            || !Objects.equals(sources.get(first).location(), s.location())) {
                        shadowed.add(kind + " '" + key + "' of " + s.describe() + " (shadowed by the one of "
                                + sources.get(first).describe() + ")");
                    }
                    continue;
                }
                into.put(key, p);
                sources.put(p, s);
            }
            return n;
        }
    }

    private static Source classPathSource(Object provider) {
        Path where = null;
        try {
            CodeSource cs = provider.getClass().getProtectionDomain().getCodeSource();
            if (cs != null && cs.getLocation() != null) {
                where = Path.of(cs.getLocation().toURI());
            }
        } catch (URISyntaxException | RuntimeException e) {
            // Unknown location: the source says "class path" alone.
        }
        return new Source("class path", where, List.of());
    }

    @SafeVarargs
    private static List<Object> concat(List<?>... lists) {
        List<Object> all = new ArrayList<>();
        for (List<?> l : lists) {
            all.addAll(l);
        }
        return all;
    }

    /** @return every transport provider found (one per name) */
    public List<TransportProvider> transports() {
        return transports;
    }

    /** @return every formatter provider found (one per name) */
    public List<FormatterProvider> formatters() {
        return formatters;
    }

    /** @return every memory provider found (one per name) */
    public List<MemoryProvider> memoryProviders() {
        return memories;
    }

    /** @return the plugin directories searched (after the class path), in order */
    public List<Path> pluginDirs() {
        return pluginDirs;
    }

    /** @return plugins and providers that failed to load, with their error */
    public List<Failure> failures() {
        return failures;
    }

    /** @return descriptions of providers that failed to load ({@link #failures()} as text) */
    public List<String> broken() {
        return failures.stream().map(Failure::toString).collect(Collectors.toUnmodifiableList());
    }

    /** @return providers not used because one of the same kind and name was found first */
    public List<String> shadowed() {
        return shadowed;
    }

    /**
     * Where a provider of this discovery came from.
     *
     * @param provider one of {@link #transports()}, {@link #formatters()}, {@link #memoryProviders()}
     * @return its source
     * @throws IllegalArgumentException when it is not one of them
     */
    public Source source(Object provider) {
        Source s = sources.get(Objects.requireNonNull(provider, "provider"));
        if (s == null) {
            throw new IllegalArgumentException(provider + " was not found by this discovery");
        }
        return s;
    }

    /**
     * The transport with that name, which must be available.
     *
     * @param name provider name
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when absent or unavailable, listing what was found
     */
    public TransportProvider transport(String name) {
        Objects.requireNonNull(name, "name");
        for (TransportProvider p : transports) {
            if (safeName(p, TransportProvider::name).equals(name)) {
                if (!available(p)) {
                    throw new KvTransferException(ErrorCode.INTERNAL, "transport '" + name + "' is not available: "
                            + cause(p) + "; found: " + describeTransports());
                }
                return p;
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no transport named '" + name + "'; found: "
                + describeTransports() + brokenSuffix());
    }

    /**
     * The formatter with that name.
     *
     * @param name provider name
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when absent, listing what was found
     */
    public FormatterProvider formatter(String name) {
        Objects.requireNonNull(name, "name");
        for (FormatterProvider p : formatters) {
            if (safeName(p, FormatterProvider::name).equals(name)) {
                return p;
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no formatter named '" + name + "'; found: "
                + describeFormatters() + brokenSuffix());
    }

    /**
     * The formatter that handles an attention type (the first found: class path order, then plugin directories).
     *
     * @param type the attention type
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when none handles it, listing what was found
     */
    public FormatterProvider formatterFor(AttentionType type) {
        Objects.requireNonNull(type, "type");
        for (FormatterProvider p : formatters) {
            try {
                if (p.handles(type)) {
                    return p;
                }
            } catch (RuntimeException | LinkageError e) {
                // A broken provider must not hide the others.
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no formatter installed for " + type + " attention; found: "
                + describeFormatters() + brokenSuffix());
    }

    /**
     * The memory provider with that name, which must be available.
     *
     * @param name provider name, e.g. {@code "cuda"}
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when absent or unavailable, listing what was found and why
     *                             each unavailable one cannot run
     */
    public MemoryProvider memoryProvider(String name) {
        Objects.requireNonNull(name, "name");
        for (MemoryProvider p : memories) {
            if (safeName(p, MemoryProvider::name).equals(name)) {
                if (!available(p)) {
                    throw new KvTransferException(ErrorCode.INTERNAL, "memory provider '" + name
                            + "' is not available: " + cause(p) + "; found: " + describeMemoryProviders());
                }
                return p;
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no memory provider named '" + name + "'; found: "
                + describeMemoryProviders() + brokenSuffix());
    }

    /** @return e.g. {@code "aeron (available), ucx (unavailable: libucp missing)"}, or {@code "none"} */
    public String describeTransports() {
        if (transports.isEmpty()) {
            return "none";
        }
        return transports.stream()
                .map(p -> safeName(p, TransportProvider::name) + (available(p) ? " (available)"
                        : " (unavailable: " + cause(p) + ")"))
                .sorted()
                .collect(Collectors.joining(", "));
    }

    /** @return e.g. {@code "mla (MLA), standard (DEFAULT)"}, or {@code "none"} */
    public String describeFormatters() {
        if (formatters.isEmpty()) {
            return "none";
        }
        return formatters.stream().map(p -> safeName(p, FormatterProvider::name) + " ("
                + String.join(", ", handled(p)) + ")").sorted().collect(Collectors.joining(", "));
    }

    /** @return e.g. {@code "cuda (unavailable: no CUDA driver), host (available)"}, or {@code "none"} */
    public String describeMemoryProviders() {
        if (memories.isEmpty()) {
            return "none";
        }
        return memories.stream()
                .map(p -> safeName(p, MemoryProvider::name) + (available(p) ? " (available)"
                        : " (unavailable: " + cause(p) + ")"))
                .sorted()
                .collect(Collectors.joining(", "));
    }

    /**
     * The attention types a formatter handles, never throwing.
     *
     * @param p a formatter provider
     * @return e.g. {@code ["DEFAULT"]}, with {@code "broken: ..."} entries for types whose check threw
     */
    public static List<String> handled(FormatterProvider p) {
        List<String> kinds = new ArrayList<>();
        for (AttentionType t : AttentionType.values()) {
            try {
                if (p.handles(t)) {
                    kinds.add(t.name());
                }
            } catch (RuntimeException | LinkageError e) {
                kinds.add("broken: " + oneLine(e));
            }
        }
        return kinds;
    }

    /**
     * A memory provider's kinds, never throwing.
     *
     * @param p a memory provider
     * @return its kinds, empty when {@code kinds()} threw
     */
    public static Set<MemoryKind> kinds(MemoryProvider p) {
        try {
            return new TreeSet<>(p.kinds());
        } catch (RuntimeException | LinkageError e) {
            return Collections.emptySet();
        }
    }

    private String brokenSuffix() {
        return failures.isEmpty() ? "" : "; failed to load: " + String.join("; ", broken());
    }

    /**
     * A provider's name, never throwing.
     *
     * @param p    the provider
     * @param name how to ask it
     * @param <T>  provider type
     * @return the name, or the class name and the failure
     */
    public static <T> String safeName(T p, Function<T, String> name) {
        try {
            return String.valueOf(name.apply(p));
        } catch (RuntimeException | LinkageError e) {
            return p.getClass().getName() + " (name() failed: " + e + ")";
        }
    }

    /**
     * Whether a transport can run here, never throwing.
     *
     * @param p the provider
     * @return {@code isAvailable()}, false when it threw
     */
    public static boolean available(TransportProvider p) {
        try {
            return p.isAvailable();
        } catch (RuntimeException | LinkageError e) {
            return false;
        }
    }

    /**
     * Whether a memory provider can allocate here, never throwing.
     *
     * @param p the provider
     * @return {@code isAvailable()}, false when it threw
     */
    public static boolean available(MemoryProvider p) {
        try {
            return p.isAvailable();
        } catch (RuntimeException | LinkageError e) {
            return false;
        }
    }

    /**
     * Why a transport cannot run, never throwing.
     *
     * @param p the provider
     * @return its cause, or what went wrong asking
     */
    public static String cause(TransportProvider p) {
        try {
            String c = p.unavailabilityCause();
            return c == null ? "no reason given" : c;
        } catch (RuntimeException | LinkageError e) {
            return "isAvailable/unavailabilityCause failed: " + e;
        }
    }

    /**
     * Why a memory provider cannot allocate, never throwing.
     *
     * @param p the provider
     * @return its cause, or what went wrong asking
     */
    public static String cause(MemoryProvider p) {
        try {
            String c = p.unavailabilityCause();
            return c == null ? "no reason given" : c;
        } catch (RuntimeException | LinkageError e) {
            return "isAvailable/unavailabilityCause failed: " + e;
        }
    }

    /** One line: the throwable's class and message and those of its causes, whitespace collapsed. */
    static String oneLine(Throwable t) {
        StringBuilder b = new StringBuilder();
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Throwable c = t; c != null && seen.add(c); c = c.getCause()) {
            String m = c.getMessage();
            String part = c.getClass().getSimpleName() + (m == null ? "" : ": " + m);
            if (b.length() > 0) {
                if (m != null && b.indexOf(m) >= 0) {
                    continue; // wrappers often repeat their cause's message
                }
                b.append(" <- ");
            }
            b.append(part);
        }
        return b.toString().replaceAll("\\s+", " ").trim();
    }

    @Override
    public String toString() {
        return "Plugins{transports: " + describeTransports() + "; formatters: " + describeFormatters()
                + "; memory: " + describeMemoryProviders() + "}";
    }
}
