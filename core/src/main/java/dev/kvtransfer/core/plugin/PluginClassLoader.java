package dev.kvtransfer.core.plugin;

import java.io.IOException;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import java.util.Objects;

/**
 * The class loader of one plugin directory, as Trino isolates its plugins: the plugin's jars, with a parent that
 * exposes only the JDK (the platform class loader) and the kvtransfer api ({@code dev.kvtransfer.api.*}, taken
 * from the loader that holds the api). Nothing else of the host leaks in — not core, not the cli, not their
 * libraries — so two plugins may each bring their own version of one library, and a plugin never sees the
 * host's copy of a library it also uses.
 *
 * <p>Lookup order: api classes and resources from the api loader; everything else from the JDK first
 * ({@code java.*} must come from there anyway), then from the plugin's jars. {@code META-INF/services} files are
 * therefore only the plugin's own: a {@link java.util.ServiceLoader} on this loader finds the plugin's providers
 * and nothing from the host's class path.
 */
public final class PluginClassLoader extends URLClassLoader {
    /** Package prefix shared with the host: the api. */
    public static final String API_PACKAGE = "dev.kvtransfer.api.";
    private static final String API_RESOURCE = API_PACKAGE.replace('.', '/');

    static {
        ClassLoader.registerAsParallelCapable();
    }

    private final ClassLoader apiLoader;
    private final String pluginName;

    /**
     * Creates a loader over a plugin's jars.
     *
     * @param pluginName the plugin (for the loader's name and {@link #toString()})
     * @param jars       the plugin's jars
     * @param apiLoader  the loader that holds {@code dev.kvtransfer.api}
     */
    public PluginClassLoader(String pluginName, List<URL> jars, ClassLoader apiLoader) {
        super("kvtransfer-plugin-" + Objects.requireNonNull(pluginName, "pluginName"),
                Objects.requireNonNull(jars, "jars").toArray(new URL[0]), ClassLoader.getPlatformClassLoader());
        this.apiLoader = Objects.requireNonNull(apiLoader, "apiLoader");
        this.pluginName = pluginName;
    }

    /** @return the plugin's name (its directory or jar name) */
    public String pluginName() {
        return pluginName;
    }

    @Override
    protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
        if (name.startsWith(API_PACKAGE)) {
            return apiLoader.loadClass(name);
        }
        synchronized (getClassLoadingLock(name)) {
            Class<?> c = findLoadedClass(name);
            if (c == null) {
                try {
                    c = getParent().loadClass(name);
                } catch (ClassNotFoundException notJdk) {
                    c = findClass(name);
                }
            }
            if (resolve) {
                resolveClass(c);
            }
            return c;
        }
    }

    @Override
    public URL getResource(String name) {
        if (name.startsWith(API_RESOURCE)) {
            return apiLoader.getResource(name);
        }
        return super.getResource(name);
    }

    @Override
    public Enumeration<URL> getResources(String name) throws IOException {
        if (name.startsWith(API_RESOURCE)) {
            URL u = apiLoader.getResource(name);
            return u == null ? Collections.emptyEnumeration() : Collections.enumeration(List.of(u));
        }
        return super.getResources(name);
    }

    @Override
    public String toString() {
        return "PluginClassLoader{" + pluginName + "}";
    }
}
