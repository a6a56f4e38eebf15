package dev.kvtransfer.core.plugin;

import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/** Compiles a few Java sources with the JDK's compiler and packs them, with resources, into a jar (test plugins). */
final class JarBuilder {
    private final Map<String, String> sources = new LinkedHashMap<>();
    private final Map<String, String> resources = new LinkedHashMap<>();
    private final List<Path> classpath = new ArrayList<>();

    /**
     * @param className fully qualified class name
     * @param code      its source
     * @return this builder
     */
    JarBuilder source(String className, String code) {
        sources.put(className, code);
        return this;
    }

    /**
     * @param path    resource path inside the jar
     * @param content its text
     * @return this builder
     */
    JarBuilder resource(String path, String content) {
        resources.put(path, content);
        return this;
    }

    /**
     * @param service   the service interface
     * @param provider  the implementing class name
     * @return this builder
     */
    JarBuilder service(Class<?> service, String provider) {
        return resource("META-INF/services/" + service.getName(), provider + "\n");
    }

    /**
     * @param entry a jar or class directory the sources compile against
     * @return this builder
     */
    JarBuilder classpath(Path entry) {
        classpath.add(entry);
        return this;
    }

    /** @return where a class of the host was loaded from (its jar or class directory) */
    static Path locationOf(Class<?> c) {
        try {
            return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Compiles and writes the jar.
     *
     * @param jar where to write it
     * @return the jar
     */
    Path build(Path jar) {
        try {
            Path work = Files.createTempDirectory("kvtransfer-jarbuilder");
            Path src = work.resolve("src");
            Path out = work.resolve("classes");
            Files.createDirectories(out);
            List<String> args = new ArrayList<>(List.of("-d", out.toString(), "--release", "17", "-proc:none"));
            if (!classpath.isEmpty()) {
                args.add("-classpath");
                args.add(classpath.stream().map(Path::toString).collect(Collectors.joining(java.io.File.pathSeparator)));
            }
            for (Map.Entry<String, String> e : sources.entrySet()) {
                Path f = src.resolve(e.getKey().replace('.', '/') + ".java");
                Files.createDirectories(f.getParent());
                Files.writeString(f, e.getValue());
                args.add(f.toString());
            }
            if (!sources.isEmpty()) {
                JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
                ByteArrayOutputStream err = new ByteArrayOutputStream();
                int rc = javac.run(null, nullStream(), new PrintStream(err, true, StandardCharsets.UTF_8),
                        args.toArray(new String[0]));
                if (rc != 0) {
                    throw new IllegalStateException("javac failed: " + err.toString(StandardCharsets.UTF_8));
                }
            }
            try (JarOutputStream j = new JarOutputStream(Files.newOutputStream(jar))) {
                try (Stream<Path> files = Files.walk(out)) {
                    for (Path f : files.filter(Files::isRegularFile).sorted().collect(Collectors.toList())) {
                        j.putNextEntry(new JarEntry(out.relativize(f).toString().replace('\\', '/')));
                        j.write(Files.readAllBytes(f));
                        j.closeEntry();
                    }
                }
                for (Map.Entry<String, String> e : resources.entrySet()) {
                    j.putNextEntry(new JarEntry(e.getKey()));
                    j.write(e.getValue().getBytes(StandardCharsets.UTF_8));
                    j.closeEntry();
                }
            }
            deleteTree(work);
            return jar;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void deleteTree(Path root) throws IOException {
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.sorted(java.util.Comparator.reverseOrder()).collect(Collectors.toList())) {
                Files.delete(p);
            }
        }
    }

    private static OutputStream nullStream() {
        return OutputStream.nullOutputStream();
    }
}
