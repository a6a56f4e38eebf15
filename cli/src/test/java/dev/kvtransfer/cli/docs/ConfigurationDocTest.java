package dev.kvtransfer.cli.docs;

import dev.kvtransfer.api.ConfigKey;
import dev.kvtransfer.aeron.AeronSettings;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransceiverConfigKeys;
import dev.kvtransfer.memory.cuda.CudaMemoryProvider;
import dev.kvtransfer.ucx.UcxSettings;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * docs/configuration.md is what {@link ConfigurationReference} renders, and every key the code defines is in it.
 * With {@code -Dkvtransfer.docs.regenerate=true} the page is rewritten instead of compared.
 */
class ConfigurationDocTest {
    /** A key literal in production code: a component prefix, then a name. */
    private static final Pattern KEY_LITERAL = Pattern.compile("\"((?:kvtransfer|aeron|ucx|mpi|cuda)\\.[A-Za-z][A-Za-z0-9_.]*)\"");
    /** Micrometer meter names are not configuration: {@code builder("kvtransfer.bytes")} and the like. */
    private static final Pattern METER_NAME = Pattern.compile("builder\\(\\s*\"([^\"]+)\"");
    private static final Path ROOT = RepositoryRoot.find();

    private static String page() throws IOException {
        return Files.readString(ROOT.resolve(ConfigurationReference.PAGE), StandardCharsets.UTF_8);
    }

    @Test
    void pageIsWhatTheGeneratorRenders() throws IOException {
        String expected = ConfigurationReference.render();
        if (Boolean.getBoolean("kvtransfer.docs.regenerate")) {
            ConfigurationReference.write(ROOT);
            return;
        }
        Path page = ROOT.resolve(ConfigurationReference.PAGE);
        String actual = Files.exists(page) ? page() : "";
        if (!actual.equals(expected)) {
            String[] a = actual.split("\n", -1);
            String[] e = expected.split("\n", -1);
            int line = 0;
            while (line < Math.min(a.length, e.length) && a[line].equals(e[line])) {
                line++;
            }
            fail(ConfigurationReference.PAGE + " differs from what the settings classes render, first at line "
                    + (line + 1) + ":\n  file:     " + (line < a.length ? a[line] : "<end of file>")
                    + "\n  rendered: " + (line < e.length ? e[line] : "<end of file>")
                    + "\nRegenerate it with:\n  " + ConfigurationReference.REGENERATE);
        }
    }

    @Test
    void everyKeyTheCodeDefinesIsDocumented() throws Exception {
        String page = page();
        Map<String, String> defined = new LinkedHashMap<>();
        for (ConfigKey k : ConfigurationReference.allKeys()) {
            defined.put(k.name(), "a CONFIG_KEYS table");
        }
        for (Class<?> c : List.of(TransceiverConfig.class, AeronSettings.class, UcxSettings.class,
                CudaMemoryProvider.class, Class.forName("dev.kvtransfer.mpi.MpiSettings"))) {
            for (String key : stringConstants(c)) {
                defined.putIfAbsent(key, c.getSimpleName());
            }
        }
        defined.putAll(literalsInProductionCode());
        List<String> missing = new ArrayList<>();
        for (Map.Entry<String, String> d : defined.entrySet()) {
            String key = d.getKey();
            String shown = key.endsWith(".") ? "`" + key : "`" + key + "`";
            if (!page.contains(shown)) {
                missing.add(key + " (from " + d.getValue() + ")");
            }
        }
        assertThat(missing).as("keys the code reads but " + ConfigurationReference.PAGE + " does not list; add them"
                + " to the settings class's CONFIG_KEYS (or ConfigurationReference), then regenerate: "
                + ConfigurationReference.REGENERATE).isEmpty();
    }

    @Test
    void tablesMatchTheKeysEachClassAccepts() throws Exception {
        assertThat(names(TransceiverConfigKeys.CONFIG_KEYS))
                .containsExactlyElementsOf(TransceiverConfig.defaults().toProperties().keySet());
        Map<String, String> defaults = new LinkedHashMap<>(TransceiverConfig.defaults().toProperties());
        for (ConfigKey k : TransceiverConfigKeys.CONFIG_KEYS) {
            assertThat(k.defaultValue()).as("default of " + k.name()).isEqualTo(defaults.get(k.name()));
        }
        assertThat(names(ConfigurationReference.AERON)).containsExactlyInAnyOrderElementsOf(AeronSettings.KNOWN);
        assertThat(names(CudaMemoryProvider.CONFIG_KEYS))
                .containsExactlyInAnyOrderElementsOf(CudaMemoryProvider.KNOWN_PROPERTIES);
        assertThat(names(dev.kvtransfer.mpi.MpiTransportProvider.CONFIG_KEYS))
                .containsExactlyInAnyOrderElementsOf(setField(Class.forName("dev.kvtransfer.mpi.MpiSettings"), "KNOWN"));
        Set<String> ucx = new HashSet<>(names(UcxSettings.CONFIG_KEYS));
        ucx.remove(UcxSettings.UCX_CONFIG_PREFIX + "<NAME>");
        assertThat(ucx).containsExactlyInAnyOrderElementsOf(setField(UcxSettings.class, "KEYS"));
    }

    /**
     * Where a settings class keeps a {@code DEFAULT_X} constant beside the key constant {@code X}, the table's
     * default is that constant's value: a changed default shows up here before it reaches the page.
     */
    @Test
    void tableDefaultsMatchTheDefaultConstants() throws Exception {
        Map<Class<?>, List<ConfigKey>> tables = new LinkedHashMap<>();
        tables.put(AeronSettings.class, ConfigurationReference.AERON);
        tables.put(UcxSettings.class, UcxSettings.CONFIG_KEYS);
        tables.put(Class.forName("dev.kvtransfer.mpi.MpiSettings"), dev.kvtransfer.mpi.MpiTransportProvider.CONFIG_KEYS);
        int compared = 0;
        for (Map.Entry<Class<?>, List<ConfigKey>> t : tables.entrySet()) {
            Map<String, String> fieldOfKey = new LinkedHashMap<>();
            for (Field f : t.getKey().getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers()) && f.getType() == String.class) {
                    f.setAccessible(true);
                    fieldOfKey.putIfAbsent((String) f.get(null), f.getName());
                }
            }
            for (ConfigKey k : t.getValue()) {
                String field = fieldOfKey.get(k.name());
                if (field == null) {
                    continue;
                }
                Field d;
                try {
                    d = t.getKey().getDeclaredField("DEFAULT_" + field);
                } catch (NoSuchFieldException e) {
                    continue;
                }
                d.setAccessible(true);
                String expected = String.valueOf(d.get(null));
                String as = "default of " + k.name() + " against " + t.getKey().getSimpleName() + "." + d.getName();
                if (k.defaultValue().contains("(")) {
                    // A derived default such as min(1024, maxImages / 2) names the constant's value.
                    assertThat(k.defaultValue()).as(as).contains(expected);
                } else {
                    assertThat(k.defaultValue()).as(as).isEqualTo(expected);
                }
                compared++;
            }
        }
        assertThat(compared).as("defaults compared").isGreaterThanOrEqualTo(15);
    }

    private static List<String> names(List<ConfigKey> keys) {
        return keys.stream().map(ConfigKey::name).collect(Collectors.toList());
    }

    @SuppressWarnings("unchecked")
    private static Set<String> setField(Class<?> c, String name) throws ReflectiveOperationException {
        Field f = c.getDeclaredField(name);
        f.setAccessible(true);
        return (Set<String>) f.get(null);
    }

    /** String constants of a settings class that look like keys (prefix, a dot, a name). */
    private static Set<String> stringConstants(Class<?> c) throws IllegalAccessException {
        Set<String> out = new TreeSet<>();
        for (Field f : c.getDeclaredFields()) {
            int m = f.getModifiers();
            if (Modifier.isStatic(m) && Modifier.isFinal(m) && f.getType() == String.class) {
                f.setAccessible(true);
                String v = (String) f.get(null);
                if (v != null && KEY_LITERAL.matcher('"' + v + '"').matches()) {
                    out.add(v);
                }
            }
        }
        return out;
    }

    /** Key-shaped string literals of every production source file (meter names and file names left out). */
    private static Map<String, String> literalsInProductionCode() throws IOException {
        Map<String, String> found = new LinkedHashMap<>();
        Set<String> meters = new HashSet<>();
        List<Path> sources;
        try (Stream<Path> s = Files.walk(ROOT)) {
            sources = s.filter(p -> p.toString().endsWith(".java"))
                    .filter(p -> ROOT.relativize(p).toString().replace('\\', '/').contains("src/main/java/"))
                    .filter(p -> !ROOT.relativize(p).startsWith("examples"))
                    .filter(p -> !p.toString().contains("/target/"))
                    .sorted().collect(Collectors.toList());
        }
        for (Path p : sources) {
            String text = Files.readString(p, StandardCharsets.UTF_8);
            Matcher mm = METER_NAME.matcher(text);
            while (mm.find()) {
                meters.add(mm.group(1));
            }
            Matcher m = KEY_LITERAL.matcher(text);
            while (m.find()) {
                found.putIfAbsent(m.group(1), ROOT.relativize(p).toString());
            }
        }
        found.keySet().removeAll(meters);
        found.keySet().removeIf(k -> k.matches(".*\\.(json|svg|csv|md|txt|so)$"));
        return found;
    }
}
