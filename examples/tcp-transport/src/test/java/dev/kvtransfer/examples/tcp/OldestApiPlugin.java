package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportProvider;

import javax.tools.Diagnostic;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.ServiceLoader;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * The frozen copy of this example in {@code src/test/oldest-api} (see its README), compiled against the api baseline
 * jar alone and loaded child-first beside today's api: the plugin a third party built against the oldest api this
 * project still supports.
 */
final class OldestApiPlugin {
    /** Where the frozen sources live, relative to this module. */
    static final Path SOURCES = Path.of("src", "test", "oldest-api");
    /** The package the frozen classes share with today's example (hence the child-first loader). */
    static final String PACKAGE = "dev.kvtransfer.examples.tcp.";

    private static Loaded loaded;

    /** The compiled plugin: its loader, the baseline it was compiled against, and the compiler's warnings. */
    record Loaded(ClassLoader loader, Path baseline, List<String> warnings) {
    }

    private OldestApiPlugin() {
    }

    /** @return the plugin's provider, as {@link ServiceLoader} finds it through the plugin's own services file */
    static TransportProvider provider() {
        ClassLoader loader = load().loader();
        for (TransportProvider p : ServiceLoader.load(TransportProvider.class, loader)) {
            if (p.getClass().getClassLoader() == loader) {
                return p;
            }
        }
        throw new IllegalStateException("the frozen plugin's services file names no TransportProvider of its own");
    }

    /** @return the compiled and loaded plugin (compiled once per JVM) */
    static synchronized Loaded load() {
        if (loaded == null) {
            try {
                loaded = compileAndLoad();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return loaded;
    }

    private static Loaded compileAndLoad() throws IOException {
        Path module = Path.of("").toAbsolutePath();
        Path baseline = baselineJar(module);
        Path sources = module.resolve(SOURCES);
        Path out = module.resolve("target").resolve("oldest-api-plugin");
        deleteTree(out);
        Files.createDirectories(out);
        List<Path> javaFiles;
        try (Stream<Path> s = Files.walk(sources.resolve("java"))) {
            javaFiles = s.filter(p -> p.toString().endsWith(".java")).sorted().collect(Collectors.toList());
        }
        if (javaFiles.isEmpty()) {
            throw new IllegalStateException("no frozen plugin sources under " + sources);
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        if (javac == null) {
            throw new IllegalStateException("this JVM has no Java compiler (a JRE?): the oldest-api check needs a JDK");
        }
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        try (StandardJavaFileManager files = javac.getStandardFileManager(diagnostics, null, StandardCharsets.UTF_8)) {
            // The baseline api alone: a reference to anything added since fails here, as it would have then.
            List<String> options = List.of("--release", "17", "-classpath", baseline.toString(), "-d", out.toString(),
                    "-proc:none", "-Xlint:-options");
            Boolean ok = javac.getTask(null, files, diagnostics, options, null,
                    files.getJavaFileObjectsFromPaths(javaFiles)).call();
            List<String> messages = new ArrayList<>();
            for (Diagnostic<? extends JavaFileObject> d : diagnostics.getDiagnostics()) {
                messages.add(d.getKind() + " " + d.getSource() + ":" + d.getLineNumber() + " " + d.getMessage(null));
            }
            if (!Boolean.TRUE.equals(ok)) {
                throw new IllegalStateException("the frozen plugin no longer compiles against " + baseline + ":\n"
                        + String.join("\n", messages));
            }
            copyTree(sources.resolve("resources"), out);
            ClassLoader loader = new ChildFirst(new URL[] {out.toUri().toURL()},
                    OldestApiPlugin.class.getClassLoader());
            return new Loaded(loader, baseline, List.copyOf(messages));
        }
    }

    /** @return the api baseline jar japicmp compares against ({@code api/baseline/*.jar} above this module) */
    static Path baselineJar(Path module) throws IOException {
        for (Path dir = module; dir != null; dir = dir.getParent()) {
            Path baselines = dir.resolve("api").resolve("baseline");
            if (Files.isDirectory(baselines)) {
                try (Stream<Path> s = Files.list(baselines)) {
                    List<Path> jars = s.filter(p -> p.getFileName().toString().endsWith(".jar")).sorted().toList();
                    if (jars.size() != 1) {
                        throw new IllegalStateException("expected one api baseline jar in " + baselines + ", found "
                                + jars);
                    }
                    return jars.get(0);
                }
            }
        }
        throw new IllegalStateException("no api/baseline directory above " + module
                + ": the oldest-api check runs inside the kvtransfer source tree");
    }

    /** Loads the frozen plugin's classes from its own directory first; everything else from the parent. */
    private static final class ChildFirst extends URLClassLoader {
        ChildFirst(URL[] urls, ClassLoader parent) {
            super("oldest-api-plugin", urls, parent);
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (!name.startsWith(PACKAGE)) {
                return super.loadClass(name, resolve);
            }
            synchronized (getClassLoadingLock(name)) {
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    c = findClass(name);
                }
                if (resolve) {
                    resolveClass(c);
                }
                return c;
            }
        }

        @Override
        public URL getResource(String name) {
            // The plugin's own services file, not today's example's.
            URL own = findResource(name);
            return own != null ? own : super.getResource(name);
        }
    }

    private static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : s.toList()) {
                Path target = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(target);
                } else {
                    Files.copy(p, target, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.sorted((a, b) -> b.getNameCount() - a.getNameCount()).toList()) {
                Files.delete(p);
            }
        }
    }
}
