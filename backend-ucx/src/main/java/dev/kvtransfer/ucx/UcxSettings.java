package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ConfigKey;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

/**
 * Every {@code ucx.*} property of a {@link TransportConfig}, parsed and validated once ({@link #from}, in the
 * manner of Aeron's {@code Context.conclude()}): a typo'd key of this transport's prefix is refused naming the
 * known ones, a bad value names its key. Immutable. The README's property table lists the same keys.
 */
public final class UcxSettings {
    /** Prefix of every property of this transport. */
    public static final String PREFIX = "ucx.";
    /** Property: {@code rcache} (UCX's registration cache) or {@code explicit} ({@code ucp_mem_map} each buffer). */
    public static final String REGISTRATION = "ucx.registration";
    /** Property: most regions the explicit registration cache keeps. */
    public static final String REGISTRATION_MAX = "ucx.registration.maxEntries";
    /** Property: milliseconds close and cancellation wait for UCX to hand a buffer back. */
    public static final String CLOSE_GRACE = "ucx.closeGraceMillis";
    /**
     * Property: microseconds the progress agent keeps polling after its last piece of work before it sleeps in
     * epoll (0 = sleep at once). Never spins while idle: the window opens only when work was done.
     */
    public static final String SPIN_MICROS = "ucx.spinMicros";
    /**
     * Property: which transports UCX may use and how peers fail. {@code shm}: shared memory only (UCX
     * {@code TLS=self,sysv,posix,cma}, without {@code cma} when {@value #CMA} is false), endpoints without UCX's
     * peer error mode
     * (which forces TCP on UCX 1.13), peers on this host only; {@code net}: UCX's default transports (or
     * {@code ucx.config.TLS}) with UCX's peer error mode, any host; {@code auto} (default): {@code shm} when the
     * configured host is a loopback address and {@code ucx.config.TLS} is not set, else {@code net}.
     */
    public static final String TRANSPORTS = "ucx.transports";
    /**
     * Property: in {@code shm} mode also use CMA ({@code process_vm_readv/writev}, zero-copy; default
     * {@code true}). A peer dying during a CMA transfer aborts a UCX 1.13.1 process whose endpoint has no error
     * callback ({@code ucx_perftest}: 3 of 3 kills); ours always have one, and 50 of 50 kills mid-transfer ended in
     * {@code PEER_LOST} (see README). {@code false} leaves sysv/posix copies only.
     */
    public static final String CMA = "ucx.cma";
    /**
     * Property: how {@code Connection.write} moves bytes. {@code auto} (default) = {@code emulated}, on every host
     * because a revoked region must take no write once {@code RegisteredRegion.close()} returned, also from
     * a writer that stalled ({@code SIGSTOP}) and resumed, and UCX's native RMA cannot promise that here. UCX 1.13
     * carries puts into caller-allocated memory as software RMA (sysv/posix/tcp AMs the owner's worker copies to
     * whatever address the put names, without checking a registration) or by CMA ({@code process_vm_writev} by the
     * writer): an owner cannot stop a stalled writer's queued puts, and measured, they land in the reused memory
     * ({@code UcxLateWriteTest}, README). On an RDMA fabric unmapping would invalidate the NIC's key, but UCX may
     * still route a same-host writer over CMA or shared memory, and jucx 1.12.1 cannot show which lane an
     * endpoint uses; so {@code auto} never chooses native. {@code native}: UCX RMA ({@code ucp_put} + flush into
     * {@code ucp_mem_map}ped memory) whatever the transports: revocation waits for each writer's acknowledgement,
     * and a writer that stalls past it may write late (see {@link #oneSidedReason()}); {@code emulated}: the api's
     * {@code EmulatedOneSided} over this transport's tagged messages (the owner's agent receives each entry
     * straight into the registered memory — a CMA rendezvous the owner pulls, in shm mode ~1.5 GB/s — and posts
     * none into a revoked region).
     */
    public static final String ONE_SIDED = "ucx.oneSided";
    /**
     * Property: whether an emulated write batch may travel as one vectored (IOV) message and, with it, a pull between
     * local instances as one-sided writes (default {@code false}). Off because a vectored receive is not always read
     * by the owner alone: {@code UcxLateWriteTest} saw a writer stopped mid-batch and resumed after the revocation
     * still write its batch into the reused memory ({@link #vectoredWrites()}).
     */
    public static final String VECTORED_WRITES = "ucx.vectoredWrites";
    /** Property: milliseconds between heartbeats on an idle control connection. */
    public static final String LIVENESS_INTERVAL = "ucx.livenessIntervalMillis";
    /** Property: milliseconds of silence on a control connection after which its peer is lost. */
    public static final String LIVENESS_TIMEOUT = "ucx.livenessTimeoutMillis";
    /** Property: milliseconds a bootstrap handshake may take. */
    public static final String HANDSHAKE_TIMEOUT = "ucx.handshakeTimeoutMillis";
    /** Property: most incoming handshakes in progress at once (the oldest goes when one more arrives). */
    public static final String MAX_PENDING_HANDSHAKES = "ucx.maxPendingHandshakes";
    /** Property: how far (ms) an authenticated hello's timestamp may be from this clock. */
    public static final String AUTH_MAX_SKEW = "ucx.authMaxSkewMillis";
    /**
     * Property: microseconds a caller spins on its operation before it parks (0 = park at once). A completion
     * that comes within the window costs no park/unpark pair (each a futex system call and a context switch).
     */
    public static final String CALLER_SPIN_MICROS = "ucx.callerSpinMicros";
    /**
     * Property: microseconds a blocked caller progresses the manager's worker itself (runs the progress agent's
     * round under its worker lock, completing its own operation there) while no work turns up, before it parks
     * and leaves the worker to the agent (0 = never: the agent alone touches the worker). See the README.
     */
    public static final String CALLER_POLL_MICROS = "ucx.callerPollMicros";
    /**
     * Property: sends of at most this many bytes on an established connection are copied and do not wait for the
     * progress agent (0 = every send waits). See {@code BufferedSends}.
     */
    public static final String BUFFERED_SEND_BYTES = "ucx.bufferedSendBytes";
    /** Property: most buffered sends in flight per manager (their slots are made on demand). */
    public static final String BUFFERED_SEND_SLOTS = "ucx.bufferedSendSlots";
    /** Property prefix: the rest of the key is a UCX setting name without {@code UCX_}, e.g. {@code ucx.config.TLS}. */
    public static final String UCX_CONFIG_PREFIX = "ucx.config.";

    /** Default of {@value #SPIN_MICROS}: 50 µs (1 MiB messages: 1.61 vs 1.33–1.43 GB/s without; see README). */
    public static final long DEFAULT_SPIN_MICROS = 50;
    /** Default of {@value #CALLER_SPIN_MICROS}. */
    public static final long DEFAULT_CALLER_SPIN_MICROS = 0;
    /** Default of {@value #CALLER_POLL_MICROS}. */
    public static final long DEFAULT_CALLER_POLL_MICROS = 0;
    /** Default of {@value #CLOSE_GRACE}. */
    public static final long DEFAULT_CLOSE_GRACE_MILLIS = 5000;
    /** Default of {@value #REGISTRATION_MAX}. */
    public static final long DEFAULT_REGISTRATION_MAX = 256;

    /** Transports of {@code shm} mode (without CMA). */
    public static final String SHM_TLS = "self,sysv,posix";

    /**
     * Every property this transport reads, with its default, the values it accepts and its meaning: the source of
     * the UCX section of {@code docs/configuration.md}. The defaults are the ones the constructor applies.
     */
    public static final java.util.List<ConfigKey> CONFIG_KEYS = java.util.List.of(
            new ConfigKey(REGISTRATION, "rcache", "rcache | explicit",
                    "Memory registration: UCX's registration cache, or an explicit ucp_mem_map per buffer."),
            new ConfigKey(REGISTRATION_MAX, Long.toString(DEFAULT_REGISTRATION_MAX), "[1, 1048576]",
                    "Most regions the explicit registration cache keeps."),
            new ConfigKey(CLOSE_GRACE, Long.toString(DEFAULT_CLOSE_GRACE_MILLIS), "[1, 600000] ms",
                    "How long close and cancellation wait for UCX to hand a buffer back."),
            new ConfigKey(SPIN_MICROS, Long.toString(DEFAULT_SPIN_MICROS), "[0, 1000000] µs",
                    "How long the progress agent keeps polling after its last piece of work before it sleeps in "
                            + "epoll (0 = sleep at once)."),
            new ConfigKey(CALLER_SPIN_MICROS, Long.toString(DEFAULT_CALLER_SPIN_MICROS), "[0, 1000000] µs",
                    "How long a blocked caller spins on its operation before it parks (0 = park at once)."),
            new ConfigKey(CALLER_POLL_MICROS, Long.toString(DEFAULT_CALLER_POLL_MICROS), "[0, 100000] µs",
                    "How long a blocked caller progresses the worker itself before it parks (0 = the agent alone "
                            + "touches the worker)."),
            new ConfigKey(BUFFERED_SEND_BYTES, "16384", "[0, 1048576] bytes",
                    "Sends of at most this many bytes are copied and do not wait for the progress agent "
                            + "(0 = every send waits)."),
            new ConfigKey(BUFFERED_SEND_SLOTS, "64", "[1, 65536]", "Most buffered sends in flight per manager."),
            new ConfigKey(TRANSPORTS, "auto", "auto | shm | net",
                    "shm: shared memory only, peers on this host; net: UCX's transports (or ucx.config.TLS) with "
                            + "peer error handling, any host; auto: shm on a loopback host without ucx.config.TLS, "
                            + "else net."),
            new ConfigKey(CMA, "true", "true | false",
                    "In shm mode also use CMA (process_vm_readv/writev, zero copy); false leaves sysv/posix copies."),
            new ConfigKey(ONE_SIDED, "auto", "auto | native | emulated",
                    "How one-sided writes (push) move: emulated over tagged messages (auto chooses it on every "
                            + "host: a revoked region then takes no late write), or native UCX RMA."),
            new ConfigKey(VECTORED_WRITES, "false", "true | false",
                    "Send an emulated write batch as one vectored (IOV) message and move a local pull as one-sided "
                            + "writes: faster layer-wise transfers, but a writer stalled mid-batch may write late "
                            + "into a revoked region (measured); off by default."),
            new ConfigKey(LIVENESS_INTERVAL, "1000", "[10, 600000] ms",
                    "Time between heartbeats on an idle control connection."),
            new ConfigKey(LIVENESS_TIMEOUT, "10000", "[50, 3600000] ms, longer than the interval",
                    "Silence on a control connection after which its peer is lost."),
            new ConfigKey(HANDSHAKE_TIMEOUT, "5000", "[10, 600000] ms", "How long a bootstrap handshake may take."),
            new ConfigKey(MAX_PENDING_HANDSHAKES, "64", "[1, 65536]",
                    "Most incoming handshakes in progress at once (the oldest goes when one more arrives)."),
            new ConfigKey(AUTH_MAX_SKEW, "120000", "[1, 86400000] ms",
                    "How far an authenticated hello's timestamp may be from this host's clock."),
            new ConfigKey(UCX_CONFIG_PREFIX + "<NAME>", "", "a UCX setting name without UCX_ (upper case)",
                    "Passed to UCX as UCX_<NAME>, e.g. ucx.config.TLS=tcp."));

    private static final Set<String> KEYS = Set.of(REGISTRATION, REGISTRATION_MAX, CLOSE_GRACE, SPIN_MICROS,
            CALLER_SPIN_MICROS, CALLER_POLL_MICROS, BUFFERED_SEND_BYTES, BUFFERED_SEND_SLOTS, TRANSPORTS, CMA, ONE_SIDED, VECTORED_WRITES, LIVENESS_INTERVAL, LIVENESS_TIMEOUT, HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES,
            AUTH_MAX_SKEW);
    private static final Pattern UCX_NAME = Pattern.compile("[A-Z][A-Z0-9_]{0,63}");

    private final String name;
    private final Duration defaultTimeout;
    private final boolean explicitRegistration;
    private final boolean vectoredWrites;
    private final int registrationMaxEntries;
    private final long closeGraceNanos;
    private final long spinNanos;
    private final long callerSpinNanos;
    private final long callerPollNanos;
    private final int bufferedSendBytes;
    private final int bufferedSendSlots;
    private final Map<String, String> ucxConfig;
    private final boolean sharedMemory;
    private final boolean cma;
    private final boolean emulatedOneSided;
    private final String oneSidedRequested;
    private final String oneSidedReason;
    private final long livenessIntervalMillis;
    private final long livenessTimeoutMillis;
    private final long handshakeTimeoutMillis;
    private final int maxPendingHandshakes;
    private final long authMaxSkewMillis;

    private UcxSettings(TransportConfig config) {
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        String reg = config.property(REGISTRATION, "rcache").trim();
        if (!reg.equals("rcache") && !reg.equals("explicit")) {
            throw bad(REGISTRATION, reg, "must be 'rcache' or 'explicit'");
        }
        this.explicitRegistration = reg.equals("explicit");
        this.registrationMaxEntries = (int) range(config, REGISTRATION_MAX, DEFAULT_REGISTRATION_MAX, 1, 1 << 20);
        this.closeGraceNanos = TimeUnit.MILLISECONDS.toNanos(range(config, CLOSE_GRACE, DEFAULT_CLOSE_GRACE_MILLIS, 1,
                600_000));
        this.spinNanos = TimeUnit.MICROSECONDS.toNanos(range(config, SPIN_MICROS, DEFAULT_SPIN_MICROS, 0, 1_000_000));
        this.callerSpinNanos = TimeUnit.MICROSECONDS.toNanos(range(config, CALLER_SPIN_MICROS,
                DEFAULT_CALLER_SPIN_MICROS, 0, 1_000_000));
        this.callerPollNanos = TimeUnit.MICROSECONDS.toNanos(range(config, CALLER_POLL_MICROS,
                DEFAULT_CALLER_POLL_MICROS, 0, 100_000));
        this.bufferedSendBytes = (int) range(config, BUFFERED_SEND_BYTES, 16 * 1024, 0, 1 << 20);
        this.bufferedSendSlots = (int) range(config, BUFFERED_SEND_SLOTS, 64, 1, 65_536);
        Map<String, String> ucx = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : config.properties().entrySet()) {
            if (e.getKey().startsWith(UCX_CONFIG_PREFIX)) {
                String n = e.getKey().substring(UCX_CONFIG_PREFIX.length());
                if (!UCX_NAME.matcher(n).matches()) {
                    throw bad(e.getKey(), e.getValue(), "the part after '" + UCX_CONFIG_PREFIX + "' must be a UCX "
                            + "setting name without 'UCX_' (upper case, digits, '_'), e.g. " + UCX_CONFIG_PREFIX + "TLS");
                }
                ucx.put(n, e.getValue());
            }
        }
        String mode = config.property(TRANSPORTS, "auto").trim();
        boolean tlsGiven = ucx.containsKey("TLS");
        switch (mode) {
            case "shm" -> {
                if (tlsGiven) {
                    throw bad(TRANSPORTS, mode, "conflicts with " + UCX_CONFIG_PREFIX + "TLS (shm mode sets the "
                            + "transports itself); drop one of them");
                }
                this.sharedMemory = true;
            }
            case "net" -> this.sharedMemory = false;
            case "auto" -> this.sharedMemory = !tlsGiven && isLoopback(config.host());
            default -> throw bad(TRANSPORTS, mode, "must be 'auto', 'shm' or 'net'");
        }
        this.cma = flag(config, CMA, true);
        this.vectoredWrites = flag(config, VECTORED_WRITES, false);
        String oneSided = config.property(ONE_SIDED, "auto").trim();
        if (!oneSided.equals("auto") && !oneSided.equals("native") && !oneSided.equals("emulated")) {
            throw bad(ONE_SIDED, oneSided, "must be 'auto', 'native' or 'emulated'");
        }
        this.oneSidedRequested = oneSided;
        String tls = ucx.containsKey("TLS") ? ucx.get("TLS") : System.getenv("UCX_TLS");
        if (oneSided.equals("auto")) {
            this.oneSidedReason = autoOneSided(sharedMemory, tls, rdmaDevices(RDMA_DEVICES));
            this.emulatedOneSided = true;
        } else if (oneSided.equals("native")) {
            this.emulatedOneSided = false;
            this.oneSidedReason = "native (" + ONE_SIDED + "=native): revocation waits for each writer's"
                    + " acknowledgement; a writer stalled past it may still write late"
                    + (sharedMemory || rdmaDevices(RDMA_DEVICES).isEmpty() || !tlsAdmitsRdma(tls)
                    ? " (here UCX puts in software RMA or by CMA: measured, such late writes land)" : "");
        } else {
            this.emulatedOneSided = true;
            this.oneSidedReason = "emulated (" + ONE_SIDED + "=emulated)";
        }
        this.livenessIntervalMillis = range(config, LIVENESS_INTERVAL, 1000, 10, 600_000);
        this.livenessTimeoutMillis = range(config, LIVENESS_TIMEOUT, 10_000, 50, 3_600_000);
        if (livenessTimeoutMillis <= livenessIntervalMillis) {
            throw bad(LIVENESS_TIMEOUT, Long.toString(livenessTimeoutMillis), "must be longer than "
                    + LIVENESS_INTERVAL + " (" + livenessIntervalMillis + ")");
        }
        this.handshakeTimeoutMillis = range(config, HANDSHAKE_TIMEOUT, 5000, 10, 600_000);
        this.maxPendingHandshakes = (int) range(config, MAX_PENDING_HANDSHAKES, 64, 1, 65_536);
        this.authMaxSkewMillis = range(config, AUTH_MAX_SKEW, 120_000, 1, 86_400_000);
        if (sharedMemory) {
            ucx.put("TLS", SHM_TLS + (cma ? ",cma" : ""));
            if (cma && vectoredWrites) {
                // The receiver reads rendezvous itself (CMA get) where UCX can, vectored receives included: fewer of
                // them wait on their sender (not all: see vectoredWrites()).
                ucx.putIfAbsent("RNDV_SCHEME", "get_zcopy");
            }
        }
        this.ucxConfig = Collections.unmodifiableMap(ucx);
    }

    /** Where Linux lists RDMA devices (InfiniBand, RoCE, iWARP: anything {@code rc}/{@code dc} can use). */
    static final java.nio.file.Path RDMA_DEVICES = java.nio.file.Path.of("/sys/class/infiniband");
    /** UCX transport names that carry RMA in hardware (reliable / dynamically connected verbs, and their alias). */
    private static final Set<String> RDMA_RMA_TLS = Set.of("ib", "rc", "rc_v", "rc_x", "rc_verbs", "rc_mlx5", "dc",
            "dc_x", "dc_mlx5");

    /**
     * The {@code auto} decision of {@value #ONE_SIDED}, with its reason: always {@code "emulated: …"}, the reason
     * saying why native RMA would not keep a revoked region quiet on this manager.
     *
     * @param sharedMemory whether the manager runs in shm mode
     * @param tls          the UCX {@code TLS} in effect ({@code ucx.config.TLS}, else {@code UCX_TLS}), or null
     * @param rdmaDevices  RDMA devices of this host
     * @return {@code "emulated: …"}
     */
    static String autoOneSided(boolean sharedMemory, String tls, java.util.List<String> rdmaDevices) {
        if (sharedMemory) {
            return "emulated: shm mode (UCX 1.13 puts into caller memory over sysv/posix are software RMA, which a"
                    + " revocation cannot stop: a stalled writer writes late)";
        }
        if (rdmaDevices.isEmpty()) {
            return "emulated: net mode without an RDMA device (puts would be software RMA over tcp, which a"
                    + " revocation cannot stop)";
        }
        if (!tlsAdmitsRdma(tls)) {
            return "emulated: net mode, UCX TLS '" + tls + "' admits no RDMA transport (rc, dc, ib)";
        }
        return "emulated: net mode with RDMA device(s) " + rdmaDevices + " (TLS " + (tls == null ? "UCX default" : "'"
                + tls + "'") + "), but UCX may put over CMA or shared memory to a same-host writer and jucx 1.12.1"
                + " cannot show the lane, so revocation is not proven to stop a stalled writer; " + ONE_SIDED
                + "=native chooses UCX RMA";
    }

    /** Whether a UCX {@code TLS} value (a list, {@code all}, or a {@code ^} exclusion list) admits rc, dc or ib. */
    static boolean tlsAdmitsRdma(String tls) {
        if (tls == null || tls.isBlank()) {
            return true;
        }
        String t = tls.trim();
        boolean exclude = t.startsWith("^");
        Set<String> names = new TreeSet<>();
        for (String n : (exclude ? t.substring(1) : t).split(",")) {
            names.add(n.trim().toLowerCase(java.util.Locale.ROOT));
        }
        if (!exclude) {
            return names.contains("all") || names.stream().anyMatch(RDMA_RMA_TLS::contains);
        }
        if (names.contains("ib")) {
            return false;
        }
        boolean rcOut = names.contains("rc") || names.containsAll(Set.of("rc_verbs", "rc_mlx5"));
        boolean dcOut = names.contains("dc") || names.contains("dc_mlx5");
        return !(rcOut && dcOut);
    }

    /** @return the RDMA devices listed under {@code dir} (empty when there is none or it cannot be read) */
    static java.util.List<String> rdmaDevices(java.nio.file.Path dir) {
        try (java.util.stream.Stream<java.nio.file.Path> s = java.nio.file.Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        } catch (java.io.IOException | SecurityException e) {
            return java.util.List.of();
        }
    }

    private static boolean isLoopback(String host) {
        try {
            return java.net.InetAddress.getByName(host).isLoopbackAddress();
        } catch (java.net.UnknownHostException e) {
            return false;
        }
    }

    /**
     * Parses and validates the {@code ucx.*} properties of a configuration.
     *
     * @param config the configuration
     * @return the settings
     * @throws IllegalArgumentException naming an unknown {@code ucx.*} key (and the known ones) or a bad value
     */
    public static UcxSettings from(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        Set<String> known = new TreeSet<>(KEYS);
        for (String k : config.properties().keySet()) {
            if (k.startsWith(UCX_CONFIG_PREFIX)) {
                known.add(k); // any UCX setting passes through; its name is checked below, its value by UCX
            }
        }
        try {
            config.checkKnownProperties(PREFIX, known);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(e.getMessage() + ", " + UCX_CONFIG_PREFIX + "<UCX setting>", e);
        }
        return new UcxSettings(config);
    }

    /** @return the known keys (without the {@value #UCX_CONFIG_PREFIX} family) */
    public static Set<String> knownKeys() {
        return KEYS;
    }

    private static long range(TransportConfig c, String key, long dflt, long min, long max) {
        long v = c.longProperty(key, dflt);
        if (v < min || v > max) {
            throw bad(key, Long.toString(v), "must be in [" + min + ", " + max + "]");
        }
        return v;
    }

    private static boolean flag(TransportConfig c, String key, boolean dflt) {
        String v = c.property(key, Boolean.toString(dflt)).trim();
        if (!v.equals("true") && !v.equals("false")) {
            throw bad(key, v, "must be 'true' or 'false'");
        }
        return v.equals("true");
    }

    private static IllegalArgumentException bad(String key, String value, String why) {
        return new IllegalArgumentException("transport property " + key + " = '" + value + "': " + why);
    }

    /** @return the manager's name (logs, thread names) */
    public String name() {
        return name;
    }

    /** @return the deadline of calls that take none */
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    /** @return whether buffers are mapped explicitly ({@value #REGISTRATION} = explicit) */
    public boolean explicitRegistration() {
        return explicitRegistration;
    }

    /** @return the LRU bound of explicit registrations */
    public int registrationMaxEntries() {
        return registrationMaxEntries;
    }

    /** @return how long close and cancellation wait for UCX, in nanoseconds */
    public long closeGraceNanos() {
        return closeGraceNanos;
    }

    /** @return how long a caller spins on its operation before parking, in nanoseconds */
    public long callerSpinNanos() {
        return callerSpinNanos;
    }

    /** @return how long a blocked caller progresses the worker itself while nothing happens, in nanoseconds */
    public long callerPollNanos() {
        return callerPollNanos;
    }

    /** @return the largest send that is buffered instead of waited for (0 = none) */
    public int bufferedSendBytes() {
        return bufferedSendBytes;
    }

    /** @return most buffered sends in flight */
    public int bufferedSendSlots() {
        return bufferedSendSlots;
    }

    /** @return the progress agent's polling window after work, in nanoseconds */
    public long spinNanos() {
        return spinNanos;
    }

    /** @return whether this manager runs in shared-memory mode (see {@value #TRANSPORTS}) */
    public boolean sharedMemory() {
        return sharedMemory;
    }

    /** @return whether one-sided writes are emulated over tagged messages ({@value #ONE_SIDED}, resolved) */
    public boolean emulatedOneSided() {
        return emulatedOneSided;
    }

    /** @return the {@value #ONE_SIDED} value asked for: {@code auto}, {@code native} or {@code emulated} */
    public String oneSidedRequested() {
        return oneSidedRequested;
    }

    /** @return which one-sided path this manager uses and why, e.g. {@code "emulated: shm mode (…)"} */
    public String oneSidedReason() {
        return oneSidedReason;
    }

    /** @return whether shared-memory mode also uses CMA */
    public boolean cma() {
        return cma;
    }

    /**
     * Whether a peer's one-sided write lands in this manager's memory in one pass: emulated writes with
     * {@value #VECTORED_WRITES} on, in shared-memory mode with CMA, where the owner reads each batch (one vectored
     * message) from the writer's memory with {@code process_vm_readv}, and every peer is of this host (shm mode
     * refuses others). Off by default with vectored writes, so a default pull stays on messages. Core then moves a pull
     * between instances of this host as one-sided writes ({@code ConnectionManager.oneCopyWritesFrom}). The owner
     * checks every entry against its registration, so no memory of it is exposed to the writer.
     *
     * @return whether writes come with one copy
     */
    public boolean oneCopyWrites() {
        return emulatedOneSided && vectoredWrites();
    }

    /**
     * Whether this manager takes an emulated write batch as one vectored message: {@value #VECTORED_WRITES} on, in
     * shared-memory mode with CMA, where the setting also asks UCX to let receivers read rendezvous themselves
     * ({@code RNDV_SCHEME=get_zcopy}, unless {@code ucx.config.RNDV_SCHEME} says otherwise). Even so a receive matched
     * by a writer that then stalled may outlive its deadline and take the writer's bytes after the region was revoked
     * and reused; hence off by default (docs/decisions, 2026-12-06).
     *
     * @return whether vectored receives are posted
     */
    public boolean vectoredWrites() {
        return vectoredWrites && sharedMemory && cma;
    }

    /** @return heartbeat interval of control connections, ms */
    public long livenessIntervalMillis() {
        return livenessIntervalMillis;
    }

    /** @return silence after which a control connection's peer is lost, ms */
    public long livenessTimeoutMillis() {
        return livenessTimeoutMillis;
    }

    /** @return the bound of one bootstrap handshake, ms */
    public long handshakeTimeoutMillis() {
        return handshakeTimeoutMillis;
    }

    /** @return most incoming handshakes in progress at once */
    public int maxPendingHandshakes() {
        return maxPendingHandshakes;
    }

    /** @return allowed clock skew of authenticated hellos, ms */
    public long authMaxSkewMillis() {
        return authMaxSkewMillis;
    }

    /**
     * @return UCX settings for the context (name without {@code UCX_} → value), in property order; in shm mode
     *         with {@code TLS} set to the shared-memory transports
     */
    public Map<String, String> ucxConfig() {
        return ucxConfig;
    }

    @Override
    public String toString() {
        return "UcxSettings{" + name + ", " + (sharedMemory ? "shm" + (cma ? "+cma" : "") : "net")
                + ", oneSided " + oneSidedReason + ", liveness " + livenessIntervalMillis + "/" + livenessTimeoutMillis + " ms, registration=" + (explicitRegistration ? "explicit" : "rcache")
                + ", closeGrace=" + TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) + " ms, spin="
                + TimeUnit.NANOSECONDS.toMicros(spinNanos) + " µs, ucx=" + ucxConfig + "}";
    }
}
