package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Plugin directories: each plugin in its own class loader whose parent shows only the JDK and the api, so two
 * plugins use two versions of one library; providers of all three kinds are found with where they came from;
 * broken, empty and duplicate plugins are reported, never fatal; loaders are made once per JVM.
 */
class PluginDirectoriesTest {
    @TempDir
    static Path dir;
    static Path root;
    static Path single;
    static Path second;

    private static final String TRANSPORT = """
            package plug.%1$s;
            import dev.kvtransfer.api.transport.*;
            import java.util.Set;
            public final class Provider implements TransportProvider {
                public String name() { return "%1$s"; }
                public boolean isAvailable() { return %2$s == null; }
                public String unavailabilityCause() { return %2$s; }
                public Set<TransportCapability> capabilities() { return Set.of(TransportCapability.CROSS_PROCESS); }
                public ConnectionManager create(TransportConfig c) { throw new UnsupportedOperationException("test"); }
                public String toString() {
                    return "%1$s uses lib " + lib.shared.Version.get() + ", sees core: " + sees("dev.kvtransfer.core.plugin.Plugins")
                            + ", sees api: " + sees("dev.kvtransfer.api.ErrorCode");
                }
                static boolean sees(String n) {
                    try {
                        Class.forName(n, false, Provider.class.getClassLoader());
                        return true;
                    } catch (ClassNotFoundException e) {
                        return false;
                    }
                }
            }
            """;

    @BeforeAll
    static void buildPlugins() throws Exception {
        Path api = JarBuilder.locationOf(TransportProvider.class);
        Path build = Files.createDirectories(dir.resolve("build"));
        Path lib1 = new JarBuilder().source("lib.shared.Version",
                "package lib.shared; public final class Version { public static String get() { return \"1\"; } }")
                .build(build.resolve("lib-1.0.jar"));
        Path lib2 = new JarBuilder().source("lib.shared.Version",
                "package lib.shared; public final class Version { public static String get() { return \"2\"; } }")
                .build(build.resolve("lib-2.0.jar"));
        root = Files.createDirectories(dir.resolve("plugins"));
        Path alpha = Files.createDirectories(root.resolve("alpha"));
        new JarBuilder().source("plug.alpha.Provider", TRANSPORT.formatted("alpha", "null")).classpath(api)
                .classpath(lib1).service(TransportProvider.class, "plug.alpha.Provider").build(alpha.resolve("alpha.jar"));
        Files.copy(lib1, alpha.resolve("lib-1.0.jar"));
        Path beta = Files.createDirectories(root.resolve("beta"));
        new JarBuilder().source("plug.beta.Provider", TRANSPORT.formatted("beta",
                        "\"libbeta.so.0 missing - apt-get install libbeta0\"")).classpath(api).classpath(lib2)
                .service(TransportProvider.class, "plug.beta.Provider").build(beta.resolve("beta.jar"));
        Files.copy(lib2, beta.resolve("lib-2.0.jar"));
        Path broken = Files.createDirectories(root.resolve("broken"));
        new JarBuilder().service(TransportProvider.class, "plug.broken.Missing").build(broken.resolve("broken.jar"));
        Path noProvider = Files.createDirectories(root.resolve("noprovider"));
        Files.copy(lib1, noProvider.resolve("lib-1.0.jar"));
        Files.createDirectories(root.resolve("empty"));
        new JarBuilder().source("plug.gamma.Formatter", """
                package plug.gamma;
                import dev.kvtransfer.api.format.*;
                import dev.kvtransfer.api.cache.KvCacheView;
                import dev.kvtransfer.api.model.AttentionType;
                public final class Formatter implements FormatterProvider {
                    public String name() { return "gamma"; }
                    public boolean handles(AttentionType t) { return t == AttentionType.MLA; }
                    public CacheFormatter create(KvCacheView c, TransferBufferPool b) { throw new UnsupportedOperationException(); }
                }
                """).classpath(api).service(FormatterProvider.class, "plug.gamma.Formatter")
                .build(root.resolve("gamma-formatter.jar"));
        single = Files.createDirectories(dir.resolve("gpu"));
        new JarBuilder().source("plug.gpu.Memory", """
                package plug.gpu;
                import dev.kvtransfer.api.memory.*;
                import java.util.*;
                public final class Memory implements MemoryProvider {
                    public String name() { return "fakegpu"; }
                    public boolean isAvailable() { return false; }
                    public String unavailabilityCause() { return "no device here"; }
                    public Set<MemoryKind> kinds() { return EnumSet.of(MemoryKind.DEVICE); }
                    public BufferManager create(Map<String, String> p) { throw new IllegalStateException("no device here"); }
                }
                """).classpath(api).service(MemoryProvider.class, "plug.gpu.Memory").build(single.resolve("fakegpu.jar"));
        second = Files.createDirectories(dir.resolve("more").resolve("alpha-again"));
        new JarBuilder().source("plug.alpha.Provider", TRANSPORT.formatted("alpha", "null")).classpath(api)
                .classpath(lib2).service(TransportProvider.class, "plug.alpha.Provider")
                .build(second.resolve("alpha.jar"));
        Files.copy(lib2, second.resolve("lib-2.0.jar"));
    }

    private static Plugins plugins(Path... dirs) {
        return new Plugins(PluginDirectoriesTest.class.getClassLoader(), List.of(dirs));
    }

    private static TransportProvider transport(Plugins p, String name) {
        return p.transports().stream().filter(t -> t.name().equals(name)).findFirst().orElseThrow();
    }

    @Test
    void eachPluginHasItsOwnLoaderSoTwoVersionsOfOneLibraryCoexist() {
        Plugins p = plugins(root);
        TransportProvider alpha = transport(p, "alpha");
        TransportProvider beta = transport(p, "beta");
        assertThat(alpha.toString()).isEqualTo("alpha uses lib 1, sees core: false, sees api: true");
        assertThat(beta.toString()).isEqualTo("beta uses lib 2, sees core: false, sees api: true");
        assertThat(alpha.getClass().getClassLoader()).isInstanceOf(PluginClassLoader.class)
                .isNotSameAs(beta.getClass().getClassLoader());
        // The api is the host's: a plugin's provider is a TransportProvider of this JVM, not a copy.
        assertThat(alpha).isInstanceOf(TransportProvider.class);
        assertThat(((PluginClassLoader) alpha.getClass().getClassLoader()).pluginName()).isEqualTo("alpha");
    }

    @Test
    void providersOfEveryKindAreFoundWithTheirSource() {
        Plugins p = plugins(root, single);
        assertThat(p.transports()).extracting(TransportProvider::name).containsExactly("alpha", "beta");
        assertThat(p.formatters()).extracting(FormatterProvider::name).containsExactly("gamma");
        assertThat(p.formatterFor(AttentionType.MLA).name()).isEqualTo("gamma");
        // core's own host provider comes from the class path, the GPU one from its directory.
        assertThat(p.memoryProviders()).extracting(MemoryProvider::name).containsExactly("host", "fakegpu");
        Plugins.Source alpha = p.source(transport(p, "alpha"));
        assertThat(alpha.plugin()).isEqualTo("alpha");
        assertThat(alpha.classPath()).isFalse();
        assertThat(alpha.location()).isEqualTo(root.resolve("alpha").toAbsolutePath());
        assertThat(alpha.jars()).extracting(j -> j.getFileName().toString()).containsExactly("alpha.jar", "lib-1.0.jar");
        assertThat(alpha.describe()).endsWith("alpha (2 jars)");
        assertThat(p.source(p.formatter("gamma")).jars()).extracting(j -> j.getFileName().toString())
                .containsExactly("gamma-formatter.jar");
        assertThat(p.source(p.formatter("gamma")).plugin()).isEqualTo("gamma-formatter");
        // A directory without subdirectories is one plugin.
        assertThat(p.source(p.memoryProviders().get(1)).plugin()).isEqualTo("gpu");
        assertThat(p.source(p.memoryProvider("host")).classPath()).isTrue();
        assertThat(p.pluginDirs()).containsExactly(root, single);
    }

    @Test
    void brokenAndEmptyPluginsAreReportedAndTheOthersStillLoad() {
        Plugins p = plugins(root, dir.resolve("does-not-exist"));
        assertThat(p.failures()).extracting(Plugins.Failure::where).containsExactly(
                root.resolve("broken").toAbsolutePath().toString(),
                root.resolve("noprovider").toAbsolutePath().toString(),
                dir.resolve("does-not-exist").toString());
        assertThat(p.failures().get(0).error()).contains("TransportProvider").contains("plug.broken.Missing")
                .doesNotContain("\n");
        assertThat(p.failures().get(1).error()).startsWith("no provider");
        assertThat(p.failures().get(2).error()).contains("does not exist");
        assertThatThrownBy(() -> p.transport("ucx")).isInstanceOf(KvTransferException.class)
                .hasMessageContaining("no transport named 'ucx'; found: alpha (available), beta (unavailable: "
                        + "libbeta.so.0 missing - apt-get install libbeta0)")
                .hasMessageContaining("failed to load: " + root.resolve("broken").toAbsolutePath());
        assertThatThrownBy(() -> p.transport("beta"))
                .hasMessageContaining("transport 'beta' is not available: libbeta.so.0 missing");
    }

    @Test
    void memoryProviderFailsWithWhatWasFoundAndWhyEachIsUnavailable() {
        Plugins p = plugins(single);
        assertThat(p.memoryProvider("host").name()).isEqualTo("host");
        assertThatThrownBy(() -> p.memoryProvider("fakegpu")).isInstanceOf(KvTransferException.class)
                .hasMessageEndingWith("memory provider 'fakegpu' is not available: no device here; found: fakegpu "
                        + "(unavailable: no device here), host (available)");
        assertThatThrownBy(() -> p.memoryProvider("cuda"))
                .hasMessageEndingWith("no memory provider named 'cuda'; found: fakegpu (unavailable: no device here), host "
                        + "(available)");
    }

    @Test
    void theFirstOfTwoPluginsWithOneNameWinsAndTheOtherIsListedAsShadowed() {
        Plugins p = plugins(root, second.getParent());
        assertThat(p.transports()).extracting(TransportProvider::name).containsExactly("alpha", "beta");
        assertThat(transport(p, "alpha").toString()).startsWith("alpha uses lib 1");
        assertThat(p.shadowed()).singleElement().asString().startsWith("transport 'alpha' of " + second)
                .contains("shadowed by the one of " + root.resolve("alpha"));
    }

    @Test
    void loadersAreMadeOncePerJvmSoPluginClassesExistOnce() {
        TransportProvider a1 = transport(plugins(root), "alpha");
        TransportProvider a2 = transport(plugins(root), "alpha");
        assertThat(a1).isNotSameAs(a2);
        assertThat(a1.getClass()).isSameAs(a2.getClass());
    }

    @Test
    void discoverReadsThePluginDirsPropertyAndWithoutItIsTheClassPathAlone() {
        String old = System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY);
        try {
            System.clearProperty(Plugins.PLUGIN_DIRS_PROPERTY);
            Plugins classPath = Plugins.discover();
            assertThat(classPath.pluginDirs()).isEmpty();
            assertThat(classPath.transports()).isEmpty();
            assertThat(classPath.memoryProviders()).extracting(MemoryProvider::name).containsExactly("host");
            assertThat(classPath.failures()).isEmpty();
            System.setProperty(Plugins.PLUGIN_DIRS_PROPERTY, root + File.pathSeparator + " " + File.pathSeparator + single);
            Plugins both = Plugins.discover();
            assertThat(both.pluginDirs()).containsExactly(root, single);
            assertThat(both.transports()).extracting(TransportProvider::name).containsExactly("alpha", "beta");
            assertThat(both.memoryProviders()).extracting(MemoryProvider::name).containsExactly("host", "fakegpu");
        } finally {
            if (old == null) {
                System.clearProperty(Plugins.PLUGIN_DIRS_PROPERTY);
            } else {
                System.setProperty(Plugins.PLUGIN_DIRS_PROPERTY, old);
            }
        }
    }

    @Test
    void aJarGivenAsAPluginDirectoryIsOnePlugin() {
        Plugins p = plugins(root.resolve("gamma-formatter.jar"));
        assertThat(p.formatters()).extracting(FormatterProvider::name).containsExactly("gamma");
        assertThat(PluginDirectories.scan(root)).extracting(PluginDirectories.Unit::name)
                .containsExactly("alpha", "beta", "broken", "gamma-formatter", "noprovider");
    }

    @Test
    void theHostMemoryProviderAllocatesAndRefusesUnknownProperties() {
        HostMemoryProvider host = new HostMemoryProvider();
        try (var mm = host.create(java.util.Map.of(HostMemoryProvider.DEBUG, "true"));
             var b = mm.allocate(4096, dev.kvtransfer.api.memory.MemoryKind.HOST)) {
            assertThat(b.size()).isEqualTo(4096);
        }
        assertThatThrownBy(() -> host.create(java.util.Map.of("host.typo", "1")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("host.typo")
                .hasMessageContaining("known: host.debug");
    }
}
