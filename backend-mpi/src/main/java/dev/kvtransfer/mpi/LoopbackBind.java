package dev.kvtransfer.mpi;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;

/**
 * Keeps an mpirun launch on the loopback interface. Open MPI 4.1 binds its out-of-band listener (in mpirun) and the
 * TCP BTL's listener (in each rank) to the wildcard address whatever {@code oob_tcp_if_include} and
 * {@code btl_tcp_if_include} say. {@code libkvbind.so} ({@code src/main/c/kvbind.c}), preloaded into mpirun and
 * exported to its ranks, turns a wildcard {@code bind()} into one on {@code 127.0.0.1} or {@code ::1}; binds to a
 * named address are left alone.
 *
 * <p>The shim is packaged beside {@code libkvmpi.so} and extracted once per JVM into an owner-only temporary
 * directory: the loader needs a file, and the file must outlive the launch, not the JVM.
 */
final class LoopbackBind {
    /** Resource path of the shim inside the jar (or target/classes). */
    static final String SHIM_RESOURCE = "/native/linux-x86_64/libkvbind.so";
    /** The variables the shim reads. */
    static final String IPV4_VARIABLE = "KVTRANSFER_BIND_IPV4";
    static final String IPV6_VARIABLE = "KVTRANSFER_BIND_IPV6";

    private static final Object LOCK = new Object();
    private static Path shim;
    private static String failure;

    private LoopbackBind() {
    }

    /**
     * @return the extracted shim, or null when this build has none (backend-mpi built without a C compiler, or not
     *         on linux-x86_64); {@link #unavailabilityCause()} says which
     */
    static Path shim() {
        synchronized (LOCK) {
            if (shim == null && failure == null) {
                try {
                    shim = extract();
                } catch (IOException | UncheckedIOException | UnsupportedOperationException e) {
                    failure = "cannot extract " + SHIM_RESOURCE + ": " + e;
                }
            }
            return shim;
        }
    }

    /** @return null when the shim is available, else why not */
    static String unavailabilityCause() {
        shim();
        synchronized (LOCK) {
            return failure;
        }
    }

    /**
     * The words before mpirun: {@code env LD_PRELOAD=SHIM[:existing] KVTRANSFER_BIND_IPV4=127.0.0.1
     * KVTRANSFER_BIND_IPV6=::1}, or nothing when the shim is unavailable.
     *
     * @return the prefix
     */
    static List<String> envPrefix() {
        Path p = shim();
        if (p == null) {
            return List.of();
        }
        String existing = System.getenv("LD_PRELOAD");
        String preload = existing == null || existing.isBlank() ? p.toString() : p + ":" + existing;
        List<String> out = new ArrayList<>();
        out.add("env");
        out.add("LD_PRELOAD=" + preload);
        out.add(IPV4_VARIABLE + "=127.0.0.1");
        out.add(IPV6_VARIABLE + "=::1");
        return out;
    }

    /** @return the mpirun flags that hand the shim's variables to every rank, or nothing without the shim */
    static List<String> exportFlags() {
        if (shim() == null) {
            return List.of();
        }
        return List.of("-x", "LD_PRELOAD", "-x", IPV4_VARIABLE, "-x", IPV6_VARIABLE);
    }

    private static Path extract() throws IOException {
        String arch = System.getProperty("os.arch");
        if (!"Linux".equals(System.getProperty("os.name")) || !("amd64".equals(arch) || "x86_64".equals(arch))) {
            throw new UnsupportedOperationException("the bind shim is built for linux-x86_64 only, this is "
                    + System.getProperty("os.name") + "/" + arch);
        }
        try (InputStream in = LoopbackBind.class.getResourceAsStream(SHIM_RESOURCE)) {
            if (in == null) {
                throw new IOException("not on the class path: backend-mpi was built without a C compiler"
                        + " (install libopenmpi-dev and rebuild)");
            }
            Path dir = Files.createTempDirectory("kvtransfer-mpi-",
                    PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            dir.toFile().deleteOnExit(); // registered first, so deleted after the file in it
            Path file = dir.resolve("libkvbind.so");
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            file.toFile().deleteOnExit();
            return file;
        }
    }
}
