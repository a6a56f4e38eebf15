package dev.kvtransfer.mpi;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Builds the {@code mpirun} command line that starts a Java main on every rank, for the cli's
 * {@code demo --backend mpi} (until it goes through {@link MpiTransportProvider#launcher()}) and for tests. Ranks are numbered in launch order, so a caller that wants
 * "context ranks first, then generation ranks" gives {@code np = ctxRanks + genRanks} and lets each process
 * derive its role from its world rank.
 *
 * <pre>{@code
 * List<String> cmd = MpiLauncher.builder()
 *         .np(4).classpath(System.getProperty("java.class.path"))
 *         .jvmFlag("-Xmx1g").mainClass("dev.kvtransfer.cli.Main").args(List.of("demo", "--rank-from-mpi"))
 *         .build();
 * new ProcessBuilder(cmd).inheritIO().start();
 * }</pre>
 */
public final class MpiLauncher {
    /** Environment variable or system property naming the mpirun binary; default {@code mpirun} on PATH. */
    public static final String MPIRUN_PROPERTY = "kvtransfer.mpirun";

    private String mpirun = defaultMpirun();
    private int np = 2;
    private boolean allowRunAsRoot = "root".equals(System.getProperty("user.name"));
    private boolean oversubscribe = true;
    private boolean loopbackOnly = true;
    private boolean sharedMemoryOnly;
    private String javaBinary = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    private String classpath = System.getProperty("java.class.path");
    private final List<String> mpiFlags = new ArrayList<>();
    private final List<String> jvmFlags = new ArrayList<>();
    private String mainClass;
    private final List<String> args = new ArrayList<>();

    private MpiLauncher() {
    }

    /** @return a builder with defaults: 2 ranks, this JVM's java and class path, oversubscribe on */
    public static MpiLauncher builder() {
        return new MpiLauncher();
    }

    /** @return the mpirun to use: {@value #MPIRUN_PROPERTY} property, env var, or {@code mpirun} */
    public static String defaultMpirun() {
        String p = System.getProperty(MPIRUN_PROPERTY);
        if (p == null || p.isBlank()) {
            p = System.getenv(MPIRUN_PROPERTY.toUpperCase().replace('.', '_'));
        }
        return p == null || p.isBlank() ? "mpirun" : p;
    }

    /**
     * Finds an mpirun executable on the PATH (or the configured one).
     *
     * @return its path, or null when there is none
     */
    public static Path findMpirun() {
        String name = defaultMpirun();
        if (name.contains("/")) {
            Path p = Path.of(name);
            return Files.isExecutable(p) ? p : null;
        }
        String path = System.getenv("PATH");
        if (path == null) {
            return null;
        }
        for (String dir : path.split(java.io.File.pathSeparator)) {
            if (!dir.isEmpty()) {
                Path p = Path.of(dir, name);
                if (Files.isExecutable(p)) {
                    return p;
                }
            }
        }
        return null;
    }

    /**
     * @param v the mpirun binary
     * @return this builder
     */
    public MpiLauncher mpirun(String v) {
        this.mpirun = Objects.requireNonNull(v, "mpirun");
        return this;
    }

    /**
     * @param v number of ranks, {@code >= 1}
     * @return this builder
     */
    public MpiLauncher np(int v) {
        if (v < 1) {
            throw new IllegalArgumentException("np = " + v + ": must be >= 1");
        }
        this.np = v;
        return this;
    }

    /**
     * @param v pass {@code --allow-run-as-root} (default: when running as root)
     * @return this builder
     */
    public MpiLauncher allowRunAsRoot(boolean v) {
        this.allowRunAsRoot = v;
        return this;
    }

    /**
     * @param v pass {@code --oversubscribe} (default true: more ranks than cores is the normal test case)
     * @return this builder
     */
    public MpiLauncher oversubscribe(boolean v) {
        this.oversubscribe = v;
        return this;
    }

    /**
     * @param v restrict Open MPI's out-of-band and TCP traffic to the loopback interface ({@code --mca
     *          oob_tcp_if_include lo --mca btl_tcp_if_include lo}, and {@code libkvbind.so} preloaded into mpirun and
     *          its ranks so that their listeners bind loopback, not the wildcard address; default true: every launch
     *          of this project is one host, and nothing may leave it)
     * @return this builder
     */
    public MpiLauncher loopbackOnly(boolean v) {
        this.loopbackOnly = v;
        return this;
    }

    /**
     * @param v move the job's bytes through shared memory only ({@code --mca btl self,vader}, unless a flag names the
     *          BTLs): no rank then listens on a TCP socket (the TCP BTL listens on the wildcard address whatever
     *          {@code btl_tcp_if_include} says). For a job whose ranks talk only to each other: connecting to another
     *          job ({@code MPI_Comm_connect} through an ompi-server) needs the TCP BTL. Default false
     * @return this builder
     */
    public MpiLauncher sharedMemoryOnly(boolean v) {
        this.sharedMemoryOnly = v;
        return this;
    }

    /**
     * @param flag an extra mpirun flag, e.g. {@code --mca}; see {@link #mca}
     * @return this builder
     */
    public MpiLauncher mpiFlag(String flag) {
        mpiFlags.add(Objects.requireNonNull(flag, "flag"));
        return this;
    }

    /**
     * @param key   MCA parameter, e.g. {@code pml}
     * @param value its value, e.g. {@code ob1}
     * @return this builder
     */
    public MpiLauncher mca(String key, String value) {
        mpiFlags.add("--mca");
        mpiFlags.add(Objects.requireNonNull(key, "key"));
        mpiFlags.add(Objects.requireNonNull(value, "value"));
        return this;
    }

    /**
     * @param v the java executable each rank runs (default: this JVM's)
     * @return this builder
     */
    public MpiLauncher javaBinary(String v) {
        this.javaBinary = Objects.requireNonNull(v, "javaBinary");
        return this;
    }

    /**
     * @param v class path of each rank (default: this JVM's)
     * @return this builder
     */
    public MpiLauncher classpath(String v) {
        this.classpath = Objects.requireNonNull(v, "classpath");
        return this;
    }

    /**
     * @param flag a JVM flag for every rank, e.g. {@code -Xmx1g}
     * @return this builder
     */
    public MpiLauncher jvmFlag(String flag) {
        jvmFlags.add(Objects.requireNonNull(flag, "flag"));
        return this;
    }

    /**
     * @param flags JVM flags for every rank
     * @return this builder
     */
    public MpiLauncher jvmFlags(List<String> flags) {
        flags.forEach(this::jvmFlag);
        return this;
    }

    /**
     * @param v the main class every rank runs
     * @return this builder
     */
    public MpiLauncher mainClass(String v) {
        this.mainClass = Objects.requireNonNull(v, "mainClass");
        return this;
    }

    /**
     * @param v program arguments (the same on every rank)
     * @return this builder
     */
    public MpiLauncher args(List<String> v) {
        v.forEach(a -> args.add(Objects.requireNonNull(a, "arg")));
        return this;
    }

    /**
     * The command line: {@code [env …] mpirun [--allow-run-as-root] [--oversubscribe] -np N [loopback flags] [mpi flags]
     * java [jvm flags] -cp CP MAIN [args]}. Each argument is one list element (no shell quoting needed).
     *
     * @return the command
     */
    public List<String> build() {
        if (mainClass == null) {
            throw new IllegalStateException("mainClass is not set");
        }
        if (classpath == null || classpath.isBlank()) {
            throw new IllegalStateException("classpath is empty");
        }
        List<String> cmd = new ArrayList<>(mpirunPrefix());
        cmd.add(javaBinary);
        cmd.addAll(jvmFlags);
        cmd.add("-cp");
        cmd.add(classpath);
        cmd.add(mainClass);
        cmd.addAll(args);
        return List.copyOf(cmd);
    }

    /** @return whether the extra flags set the MCA parameter (Open MPI refuses one listed twice) */
    private boolean setsMca(String key) {
        for (int i = 0; i + 1 < mpiFlags.size(); i++) {
            if (mpiFlags.get(i).equals("--mca") && mpiFlags.get(i + 1).equals(key)) {
                return true;
            }
        }
        return false;
    }

    /**
     * The mpirun part alone ({@code [env LD_PRELOAD=… KVTRANSFER_BIND_IPV4=127.0.0.1 KVTRANSFER_BIND_IPV6=::1] mpirun
     * [--allow-run-as-root] [--oversubscribe] -np N [loopback flags] [mpi flags]}), to launch a program that is not
     * Java (e.g. the C bandwidth baseline) the same way. The {@code env} words come with the loopback flags, where
     * this build has the bind shim.
     *
     * @return the command prefix
     */
    public List<String> mpirunPrefix() {
        List<String> cmd = new ArrayList<>();
        if (loopbackOnly) {
            // Open MPI 4.1 binds its out-of-band and TCP BTL listeners to the wildcard address whatever the
            // *_if_include parameters say; the preloaded shim moves those binds onto loopback.
            cmd.addAll(LoopbackBind.envPrefix());
        }
        cmd.add(mpirun);
        if (allowRunAsRoot) {
            cmd.add("--allow-run-as-root");
        }
        if (oversubscribe) {
            cmd.add("--oversubscribe");
        }
        cmd.add("-np");
        cmd.add(Integer.toString(np));
        if (loopbackOnly) {
            cmd.addAll(List.of("--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"));
            cmd.addAll(LoopbackBind.exportFlags());
            if (sharedMemoryOnly && !setsMca("btl")) {
                // The TCP BTL listens on the wildcard address whatever btl_tcp_if_include says: without it no rank
                // listens on any socket.
                cmd.addAll(List.of("--mca", "btl", "self,vader"));
            }
        }
        cmd.addAll(mpiFlags);
        return List.copyOf(cmd);
    }
}
