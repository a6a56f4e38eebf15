package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.process.ChildJvm;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Our {@link Connection} between two processes next to {@code ucx_perftest} in the same run: bandwidth of
 * blocking sends per message size (one stream, or {@code --streams N} concurrent streams on their own tags),
 * small-message round trips, one-sided writes ({@code --put}: {@code Connection.write} of one entry per size,
 * each waiting for remote completion, next to {@code ucx_perftest -t ucp_put_bw}), and the transports each side selected (UCX's {@code ep_cfg} log lines; run with
 * {@code UCX_LOG_LEVEL=info}, as {@code bench.sh} does).
 *
 * <p>Every run starts a fresh receiver JVM per variant of ours ({@code shm}: the default on loopback,
 * sysv/posix/cma; {@code nocma}: shm without CMA; {@code net}: UCX TCP with peer error mode), times {@code count} messages per size
 * from the first send to the receiver's acknowledgement of the last and checks the last message of every stream
 * byte by byte; then runs {@code ucx_perftest -t tag_bw} (and {@code tag_lat}) server + client on loopback in
 * three variants: UCX's default (sysv + cma here), {@code UCX_TLS=self,sysv,posix} (our shm transports) and
 * {@code -e} (error handling: TCP). With {@code --runs N} everything repeats N times and the table shows
 * min / median / max per cell, the ratio of medians to perftest's default, all from the same run.
 *
 * With {@code --window N} each stream keeps N posted sends ({@code Connection.sendAsync}) outstanding and the
 * receiver N posted receives ({@code recvAsync}), as {@code tag_bw} keeps a window; the default 1 is blocking calls.
 *
 * <p>Usage: {@code UcxBench [--runs 3] [--sizes 1m,16m,64m] [--bytes 1g] [--warmup 3] [--streams 1] [--window 1]
 * [--variants shm,nocma,net] [--lat-iters 20000] [--set ucx.key=value ...] [--put] [--perftest ucx_perftest | --no-perftest] [--role idle]}.
 * Exit code 0 when every transfer verified.
 */
public final class UcxBench {
    private static final int CTRL = 1;
    private static final int LAT = 2;
    private static final int DATA = 1 << 10;
    private static final int ACK = 1 << 11;
    private static final int STATUS = 1 << 12;
    private static final HostBufferManager MEMORY = new HostBufferManager();
    private static final Pattern EP_CFG = Pattern.compile("ep_cfg\\[\\d+\\]: (.*)$");
    private static final Pattern FINAL = Pattern.compile("^\\s*(\\d+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+"
            + "([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)(\\s|$)");

    private UcxBench() {
    }

    /**
     * Runs the comparison (default), the idle check or the receiver role.
     *
     * @param args see the class comment
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        Options o = Options.parse(args);
        switch (o.role) {
            case "receiver" -> receiver(o);
            case "idle" -> idle(o, System.out);
            default -> System.exit(run(System.out, args));
        }
    }

    /**
     * The comparison; returns 0 when every transfer verified.
     *
     * @param out  where the report goes
     * @param args the options of the class comment
     * @return exit code
     * @throws Exception on failure
     */
    public static int run(PrintStream out, String... args) throws Exception {
        Options o = Options.parse(args);
        String tls = System.getenv("UCX_TLS");
        out.printf(Locale.ROOT, "UCX_TLS=%s; runs=%d; sizes=%s; bytes per size=%d; warmup=%d; streams=%d; "
                        + "window=%d; variants=%s; lat-iters=%d; load average %s%n", tls == null ? "(unset)" : tls,
                o.runs, o.sizes, o.bytes, o.warmup, o.streams, o.window, o.variants, o.latIters, loadAverage());
        Results res = new Results();
        Map<String, Set<String>> transports = new LinkedHashMap<>();
        boolean verified = true;
        for (int run = 1; run <= o.runs; run++) {
            out.println("-- run " + run + " of " + o.runs + " (load " + loadAverage() + ")");
            for (String v : o.variants) {
                verified &= ours(o, v, res, transports.computeIfAbsent("ours " + v, k -> new LinkedHashSet<>()),
                        out);
            }
            if (o.perftest != null) {
                for (Perftest p : Perftest.values()) {
                    Set<String> t = transports.computeIfAbsent("ucx_perftest " + p.label, k -> new LinkedHashSet<>());
                    for (long size : o.sizes) {
                        long count = Math.max(4, o.bytes / size);
                        res.add(p.column(), size, perftest(o, p, "tag_bw", size, count, t, out));
                    }
                    if (o.latIters > 0) {
                        res.add(p.column(), -1, 2 * perftest(o, p, "tag_lat", 8, o.latIters, t, out));
                    }
                    if (o.put && p != Perftest.ERR) {
                        for (long size : o.sizes) {
                            long count = Math.max(4, o.bytes / size);
                            res.add(p.column() + " ucp_put_bw", size, perftest(o, p, "ucp_put_bw", size, count, t,
                                    out));
                        }
                    }
                }
            }
        }
        res.print(out, o);
        out.println();
        out.println("transports UCX selected (ep_cfg lines; the receiver's for ours, the client's for perftest):");
        transports.forEach((k, v) -> out.printf(Locale.ROOT, "  %-34s %s%n", k + ":", v.isEmpty()
                ? "(none logged: set UCX_LOG_LEVEL=info)" : v));
        out.println(verified ? "all transfers verified" : "VERIFICATION FAILED");
        return verified ? 0 : 1;
    }

    private static String loadAverage() {
        try {
            return java.nio.file.Files.readString(java.nio.file.Path.of("/proc/loadavg")).split(" ")[0];
        } catch (IOException e) {
            return "?";
        }
    }

    /** Transport properties from {@code --set key=value}, applied to both sides. */
    private static final Map<String, String> SETTINGS = new LinkedHashMap<>();

    private static TransportConfig config(String name, String variant) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(Duration.ofMinutes(2));
        SETTINGS.forEach(b::property); // --set key=value, both sides
        switch (variant) {
            case "shm" -> { }
            case "nocma" -> b.property(UcxSettings.CMA, "false");
            case "net" -> b.property(UcxSettings.TRANSPORTS, "net");
            default -> throw new IllegalArgumentException("variant " + variant + ": shm, nocma or net");
        }
        return b.build();
    }

    private static MemoryBuffer alloc(long bytes) {
        return MEMORY.allocate(bytes, MemoryKind.HOST);
    }

    /** One variant of ours against a fresh receiver JVM: every size, then the round-trip latency. */
    private static boolean ours(Options o, String variant, Results res, Set<String> transports, PrintStream out)
            throws Exception {
        boolean ok = true;
        long maxSize = o.sizes.stream().mapToLong(Long::longValue).max().orElse(8);
        List<String> childArgs = new ArrayList<>(List.of("--role", "receiver", "--variants", variant, "--streams",
                Integer.toString(o.streams), "--window", Integer.toString(o.window)));
        SETTINGS.forEach((k, v) -> childArgs.addAll(List.of("--set", k + "=" + v)));
        try (ChildJvm child = ChildJvm.start(UcxBench.class, "1g", childArgs);
             ConnectionManager m = new UcxTransportProvider().create(config("bench-sender", variant))) {
            Connection c = m.connection(child.awaitLine("ADDRESS ", Duration.ofSeconds(60)));
            MemoryBuffer small = alloc(64);
            MemoryBuffer[] bufs = new MemoryBuffer[o.streams];
            for (int s = 0; s < o.streams; s++) {
                bufs[s] = alloc(maxSize);
            }
            ExecutorService pool = Executors.newFixedThreadPool(o.streams);
            try {
                for (long size : o.sizes) {
                    long count = Math.max(4, o.bytes / size / o.streams);
                    ByteBuffer h = small.asByteBuffer();
                    h.putLong(0, 1).putLong(8, size).putLong(16, o.warmup).putLong(24, count);
                    c.send(CTRL, small, 0, 32);
                    CyclicBarrier start = new CyclicBarrier(o.streams + 1);
                    List<Future<Boolean>> fs = new ArrayList<>();
                    for (int s = 0; s < o.streams; s++) {
                        int k = s;
                        fs.add(pool.submit(() -> stream(c, bufs[k], k, size, o.warmup, count, start, o.window)));
                    }
                    start.await(120, TimeUnit.SECONDS); // every stream warmed up
                    long t0 = System.nanoTime();
                    start.await(600, TimeUnit.SECONDS); // every stream's last message acknowledged
                    long ns = System.nanoTime() - t0;
                    boolean good = true;
                    for (Future<Boolean> f : fs) {
                        good &= f.get(60, TimeUnit.SECONDS);
                    }
                    ok &= good;
                    double gbs = (double) size * count * o.streams / ns;
                    out.printf(Locale.ROOT, "  ours %-4s %9s x %6d x %d stream(s): %8.3f GB/s %8.0f msg/s%s%n",
                            variant, human(size), count, o.streams, gbs, count * o.streams * 1e9 / ns,
                            good ? "" : " VERIFICATION FAILED");
                    res.add("ours " + variant, size, gbs);
                }
                if (o.put) {
                    for (long size : o.sizes) {
                        long count = Math.max(4, o.bytes / size);
                        ByteBuffer h = small.asByteBuffer();
                        h.putLong(0, 3).putLong(8, size).putLong(16, 0).putLong(24, 0);
                        c.send(CTRL, small, 0, 32);
                        MemoryBuffer st = alloc(8);
                        c.recv(STATUS, st, 0, 8);
                        int n = (int) st.asByteBuffer().getLong(0);
                        MemoryBuffer raw = alloc(n);
                        c.recv(ACK, raw, 0, n);
                        byte[] bytes = new byte[n];
                        raw.asByteBuffer().get(0, bytes);
                        dev.kvtransfer.api.transport.RegionDescriptor d = dev.kvtransfer.api.transport.RegionDescriptor
                                .readFrom(dev.kvtransfer.api.wire.WireReader.raw(bytes));
                        fillPattern(bufs[0], size, size);
                        dev.kvtransfer.api.transport.WriteBatch b = new dev.kvtransfer.api.transport.WriteBatch()
                                .add(bufs[0], 0, d, 0, size);
                        for (int i = 0; i < o.warmup; i++) {
                            c.write(b, Duration.ofMinutes(2));
                        }
                        long t0 = System.nanoTime();
                        for (long i = 0; i < count; i++) {
                            c.write(b, Duration.ofMinutes(2));
                        }
                        long ns = System.nanoTime() - t0;
                        c.send(ACK, st, 0, 8);
                        c.recv(STATUS, st, 0, 8);
                        boolean good = st.asByteBuffer().getLong(0) == 1;
                        ok &= good;
                        double gbs = (double) size * count / ns;
                        out.printf(Locale.ROOT, "  ours %-4s write %9s x %6d: %8.3f GB/s (each write waits for remote"
                                + " completion)%s%n", variant, human(size), count, gbs, good ? "" : " VERIFICATION FAILED");
                        res.add("ours " + variant + " write", size, gbs);
                        st.close();
                        raw.close();
                    }
                }
                if (o.latIters > 0) {
                    ByteBuffer h = small.asByteBuffer();
                    h.putLong(0, 2).putLong(8, 8).putLong(16, o.latIters / 10).putLong(24, o.latIters);
                    c.send(CTRL, small, 0, 32);
                    long[] rtt = new long[o.latIters];
                    for (int i = 0; i < o.latIters / 10 + o.latIters; i++) {
                        long t = System.nanoTime();
                        c.send(LAT, small, 32, 8);
                        c.recv(LAT, small, 40, 8);
                        if (i >= o.latIters / 10) {
                            rtt[i - o.latIters / 10] = System.nanoTime() - t;
                        }
                    }
                    Arrays.sort(rtt);
                    double p50 = rtt[rtt.length / 2] / 1e3;
                    out.printf(Locale.ROOT, "  ours %-4s 8 B round trip: p50 %.1f µs, p99 %.1f µs, max %.1f µs%n",
                            variant, p50, rtt[(int) (rtt.length * 0.99)] / 1e3, rtt[rtt.length - 1] / 1e3);
                    res.add("ours " + variant, -1, p50);
                }
            } finally {
                pool.shutdownNow();
            }
            small.asByteBuffer().putLong(0, 0);
            c.send(CTRL, small, 0, 32);
            child.awaitLine("BYE", Duration.ofSeconds(60));
            child.awaitLine("EOF", Duration.ofSeconds(60)); // UCX's own log lines are flushed at exit
            for (String l : child.seen()) {
                Matcher mt = EP_CFG.matcher(l);
                if (mt.find()) {
                    transports.add(mt.group(1).trim());
                }
            }
        }
        return ok;
    }

    private static boolean stream(Connection c, MemoryBuffer buf, int k, long size, long warmup, long count,
                                  CyclicBarrier start, int window) throws Exception {
        MemoryBuffer small = alloc(8);
        try {
            fillPattern(buf, size, size + k);
            for (long i = 0; i < warmup; i++) {
                c.send(DATA + k, buf, 0, size);
            }
            c.recv(ACK + k, small, 0, 8);
            start.await(120, TimeUnit.SECONDS);
            Window w = new Window(window);
            for (long i = 0; i < count; i++) {
                // Every message of a stream leaves the same buffer: a posted send only reads it.
                if (window == 1 || !w.post(() -> c.sendAsync(DATA + k, buf, 0, size, Duration.ofMinutes(10), w))) {
                    c.send(DATA + k, buf, 0, size);
                }
            }
            w.drain();
            c.recv(ACK + k, small, 0, 8);
            start.await(600, TimeUnit.SECONDS);
            c.recv(STATUS + k, small, 0, 8);
            return small.asByteBuffer().getLong(0) == 1;
        } finally {
            small.close();
        }
    }

    // ---------------------------------------------------------------- ucx_perftest

    /** The perftest variants of the comparison. */
    enum Perftest {
        DEFAULT("default", null, List.of()),
        SHM("TLS=self,sysv,posix", "self,sysv,posix", List.of()),
        ERR("-e (error handling)", null, List.of("-e"));

        final String label;
        final String tls;
        final List<String> flags;

        Perftest(String label, String tls, List<String> flags) {
            this.label = label;
            this.tls = tls;
            this.flags = flags;
        }

        String column() {
            return "perftest " + label;
        }
    }

    /** Runs one ucx_perftest pair; returns GB/s for bandwidth tests, µs for latency (NaN when it failed). */
    private static double perftest(Options o, Perftest p, String test, long size, long count, Set<String> tls,
                                   PrintStream out) throws Exception {
        for (int attempt = 0; attempt < 3; attempt++) {
            int port;
            try (ServerSocket s = new ServerSocket(0)) {
                port = s.getLocalPort();
            }
            List<String> common = new ArrayList<>(List.of("-p", String.valueOf(port), "-f"));
            common.addAll(p.flags);
            List<String> server = new ArrayList<>(List.of(o.perftest));
            server.addAll(common);
            ProcessBuilder spb = new ProcessBuilder(server).redirectErrorStream(true);
            if (p.tls != null) {
                spb.environment().put("UCX_TLS", p.tls);
            }
            Process sp = spb.start();
            CompletableFuture<List<String>> sOut = collect(sp);
            // The server has no readiness signal; the client is retried when it could not connect.
            Thread.sleep(300);
            List<String> client = new ArrayList<>(List.of(o.perftest, "127.0.0.1", "-t", test, "-s",
                    String.valueOf(size), "-n", String.valueOf(count), "-w", String.valueOf(Math.max(o.warmup,
                            test.equals("tag_lat") ? count / 10 : o.warmup))));
            client.addAll(common);
            ProcessBuilder cpb = new ProcessBuilder(client).redirectErrorStream(true);
            if (p.tls != null) {
                cpb.environment().put("UCX_TLS", p.tls);
            }
            Process cp = cpb.start();
            List<String> lines = collect(cp).get(600, TimeUnit.SECONDS);
            cp.waitFor(30, TimeUnit.SECONDS);
            if (!sp.waitFor(30, TimeUnit.SECONDS)) {
                sp.destroyForcibly();
            }
            sOut.get(30, TimeUnit.SECONDS);
            for (String l : lines) {
                Matcher t = EP_CFG.matcher(l);
                if (t.find()) {
                    tls.add(t.group(1).trim());
                }
                Matcher m = FINAL.matcher(l);
                if (m.lookingAt()) { // UCX info logging may continue on the same line
                    if (test.equals("tag_lat")) {
                        double us = Double.parseDouble(m.group(2)); // typical (median) one-way latency, µs
                        out.printf(Locale.ROOT, "  perftest %-22s 8 B one-way p50 %.2f µs (round trip %.1f µs)%n",
                                p.label, us, 2 * us);
                        return us;
                    }
                    double gbs = Double.parseDouble(m.group(6)) * 1048576.0 / 1e9; // overall MB/s, MB = 2^20
                    out.printf(Locale.ROOT, "  perftest %-22s %-10s %9s x %6d: %8.3f GB/s%n", p.label, test,
                            human(size), count, gbs);
                    return gbs;
                }
            }
            out.println("  ucx_perftest attempt " + (attempt + 1) + " gave no result: "
                    + String.join(" / ", lines.subList(Math.max(0, lines.size() - 3), lines.size())));
        }
        return Double.NaN;
    }

    private static CompletableFuture<List<String>> collect(Process p) {
        CompletableFuture<List<String>> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            List<String> lines = new ArrayList<>();
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8))) {
                for (String l; (l = r.readLine()) != null; ) {
                    lines.add(l);
                }
            } catch (IOException e) {
                lines.add("(read failed: " + e + ")");
            }
            f.complete(lines);
        }, "ucx-bench-reader");
        t.setDaemon(true);
        t.start();
        return f;
    }

    // ---------------------------------------------------------------- receiver JVM

    private static void receiver(Options o) throws Exception {
        String variant = o.variants.get(0);
        try (ConnectionManager m = new UcxTransportProvider().create(config("bench-receiver", variant))) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            MemoryBuffer small = alloc(64);
            Connection c = m.recvConnect(CTRL, small, 0, 32, Duration.ofMinutes(2));
            ExecutorService pool = Executors.newFixedThreadPool(o.streams);
            MemoryBuffer[] bufs = new MemoryBuffer[o.streams];
            while (true) {
                ByteBuffer h = small.asByteBuffer();
                long op = h.getLong(0);
                long size = h.getLong(8);
                long warmup = h.getLong(16);
                long count = h.getLong(24);
                if (op == 0) {
                    break;
                }
                if (op == 2) {
                    for (long i = 0; i < warmup + count; i++) {
                        c.recv(LAT, small, 40, 8);
                        c.send(LAT, small, 40, 8);
                    }
                } else if (op == 3) {
                    // One-sided writes into a region of ours: hand out its descriptor, check it when told.
                    MemoryBuffer target = alloc(size);
                    try (dev.kvtransfer.api.transport.RegisteredRegion r = m.register(target)) {
                        dev.kvtransfer.api.wire.WireWriter w = dev.kvtransfer.api.wire.WireWriter.raw();
                        r.descriptor().writeTo(w);
                        byte[] raw = w.toByteArray();
                        MemoryBuffer d = alloc(raw.length);
                        d.asByteBuffer().put(0, raw);
                        MemoryBuffer st = alloc(8);
                        st.asByteBuffer().putLong(0, raw.length);
                        c.send(STATUS, st, 0, 8);
                        c.send(ACK, d, 0, raw.length);
                        c.recv(ACK, st, 0, 8, Duration.ofMinutes(10)); // the writer is done
                        st.asByteBuffer().putLong(0, checkPattern(target, size, size) ? 1 : 0);
                        c.send(STATUS, st, 0, 8);
                    }
                    target.close();
                } else {
                    List<Future<?>> fs = new ArrayList<>();
                    for (int s = 0; s < o.streams; s++) {
                        int k = s;
                        if (bufs[k] == null || bufs[k].size() < size) {
                            bufs[k] = alloc(size);
                        }
                        fs.add(pool.submit(() -> {
                            MemoryBuffer st = alloc(8);
                            for (long i = 0; i < warmup; i++) {
                                c.recv(DATA + k, bufs[k], 0, size);
                            }
                            c.send(ACK + k, st, 0, 8);
                            Window w = new Window(o.window);
                            for (long i = 0; i < count; i++) {
                                // Posted receives into one buffer land the same bytes; the last one is checked.
                                if (o.window == 1 || !w.post(() -> c.recvAsync(DATA + k, bufs[k], 0, size,
                                        Duration.ofMinutes(10), w))) {
                                    c.recv(DATA + k, bufs[k], 0, size);
                                }
                            }
                            w.drain();
                            c.send(ACK + k, st, 0, 8);
                            st.asByteBuffer().putLong(0, checkPattern(bufs[k], size, size + k) ? 1 : 0);
                            c.send(STATUS + k, st, 0, 8);
                            return null;
                        }));
                    }
                    for (Future<?> f : fs) {
                        f.get(600, TimeUnit.SECONDS);
                    }
                }
                c.recv(CTRL, small, 0, 32, Duration.ofMinutes(10));
            }
            pool.shutdownNow();
        }
        System.out.println("BYE");
        System.out.flush();
        System.exit(0);
    }

    // ---------------------------------------------------------------- idle cost

    /**
     * Two connected managers in this JVM, then {@code seconds} with nothing to do: prints the CPU time their agents
     * and the whole process used (a hot spin would show ~100% of a core per agent).
     */
    static void idle(Options o, PrintStream out) throws Exception {
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        try (ConnectionManager a = new UcxTransportProvider().create(TransportConfig.builder().name("idle-a")
                .build());
             ConnectionManager b = new UcxTransportProvider().create(TransportConfig.builder().name("idle-b")
                     .build())) {
            UcxTestSupport.exchange(a, b, CTRL, 1);
            List<Thread> agents = new ArrayList<>();
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (t.getName().startsWith("ucx-progress-idle-") || t.getName().startsWith("ucx-bootstrap-idle-")) {
                    agents.add(t);
                }
            }
            long[] cpu0 = new long[agents.size()];
            for (int i = 0; i < cpu0.length; i++) {
                cpu0[i] = mx.getThreadCpuTime(agents.get(i).getId());
            }
            long proc0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            Thread.sleep(o.seconds * 1000L);
            long wall = System.nanoTime() - t0;
            long proc = os.getProcessCpuTime() - proc0;
            for (int i = 0; i < cpu0.length; i++) {
                long used = mx.getThreadCpuTime(agents.get(i).getId()) - cpu0[i];
                out.printf(Locale.ROOT, "%s: %.1f ms CPU over %.1f s idle (%.3f%% of a core)%n",
                        agents.get(i).getName(), used / 1e6, wall / 1e9, 100.0 * used / wall);
            }
            out.printf(Locale.ROOT, "whole process (2 managers, UCX async threads, JVM): %.1f ms CPU over %.1f s"
                    + " (%.3f%% of a core)%n", proc / 1e6, wall / 1e9, 100.0 * proc / wall);
        }
    }

    // ---------------------------------------------------------------- patterns, formatting, options

    private static long word(long seed, long i) {
        long x = seed * 0x9E3779B97F4A7C15L + i * 0xC2B2AE3D27D4EB4FL;
        return x ^ (x >>> 31);
    }

    static void fillPattern(MemoryBuffer b, long size, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        long i = 0;
        for (; i + 8 <= size; i += 8) {
            bb.putLong((int) i, word(seed, i));
        }
        for (; i < size; i++) {
            bb.put((int) i, (byte) word(seed, i));
        }
    }

    static boolean checkPattern(MemoryBuffer b, long size, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        long i = 0;
        for (; i + 8 <= size; i += 8) {
            if (bb.getLong((int) i) != word(seed, i)) {
                return false;
            }
        }
        for (; i < size; i++) {
            if (bb.get((int) i) != (byte) word(seed, i)) {
                return false;
            }
        }
        return true;
    }

    static String human(long size) {
        if (size >= 1 << 20 && size % (1 << 20) == 0) {
            return (size >> 20) + " MiB";
        }
        if (size >= 1024 && size % 1024 == 0) {
            return (size >> 10) + " KiB";
        }
        return size + " B";
    }

    /** Values per (column, size), size -1 = latency. */
    static final class Results {
        private final Map<String, Map<Long, List<Double>>> cells = new LinkedHashMap<>();

        void add(String column, long size, double v) {
            cells.computeIfAbsent(column, k -> new LinkedHashMap<>()).computeIfAbsent(size, k -> new ArrayList<>())
                    .add(v);
        }

        static double[] mmm(List<Double> vs) {
            if (vs == null || vs.isEmpty()) {
                return null;
            }
            double[] a = vs.stream().mapToDouble(Double::doubleValue).filter(d -> !Double.isNaN(d)).sorted()
                    .toArray();
            if (a.length == 0) {
                return null;
            }
            return new double[] {a[0], a.length % 2 == 1 ? a[a.length / 2] : (a[a.length / 2 - 1] + a[a.length / 2])
                    / 2, a[a.length - 1]};
        }

        void print(PrintStream out, Options o) {
            List<Long> rows = new ArrayList<>(o.sizes);
            if (o.latIters > 0) {
                rows.add(-1L);
            }
            String base = Perftest.DEFAULT.column();
            out.println();
            out.println("min / median / max of " + o.runs + " run(s); GB/s = 10^9 B/s; latency rows: 8 B round trip"
                    + " p50 in µs (perftest: 2 x its one-way typical latency); ratio = median / median of " + base);
            StringBuilder head = new StringBuilder("| size |");
            StringBuilder rule = new StringBuilder("|---:|");
            for (String c : cells.keySet()) {
                head.append(' ').append(c).append(" |");
                rule.append("---:|");
                if (!c.equals(base) && cells.containsKey(base)) {
                    head.append(" ratio |");
                    rule.append("---:|");
                }
            }
            out.println(head);
            out.println(rule);
            for (long size : rows) {
                StringBuilder line = new StringBuilder("| " + (size < 0 ? "8 B RTT (µs)" : human(size)) + " |");
                double[] ref = mmm(cells.getOrDefault(base, Map.of()).get(size));
                for (String c : cells.keySet()) {
                    double[] v = mmm(cells.get(c).get(size));
                    line.append(v == null ? " n/a |" : String.format(Locale.ROOT, " %.3f / %.3f / %.3f |", v[0], v[1],
                            v[2]));
                    if (!c.equals(base) && cells.containsKey(base)) {
                        line.append(v == null || ref == null ? " n/a |" : String.format(Locale.ROOT, " %.2f |",
                                v[1] / ref[1]));
                    }
                }
                out.println(line);
            }
        }
    }

    /**
     * Keeps at most {@code size} posted sends or receives of one stream outstanding ({@code --window}): a post waits
     * for a slot, {@link #drain} for all of them; a failed one fails the stream.
     */
    static final class Window implements dev.kvtransfer.api.transport.SendCompletion,
            dev.kvtransfer.api.transport.RecvCompletion {
        private final int size;
        private final java.util.concurrent.Semaphore slots;
        private volatile dev.kvtransfer.api.transport.TransportException failure;

        Window(int size) {
            this.size = size;
            this.slots = new java.util.concurrent.Semaphore(size);
        }

        /** @return whether the transport posted it (else nothing posted and the slot is given back) */
        boolean post(java.util.function.BooleanSupplier poster) throws InterruptedException {
            check();
            if (!slots.tryAcquire(10, TimeUnit.MINUTES)) {
                throw new IllegalStateException("no posted operation ended in 10 minutes");
            }
            if (!poster.getAsBoolean()) {
                slots.release();
                return false;
            }
            return true;
        }

        void drain() throws InterruptedException {
            if (!slots.tryAcquire(size, 10, TimeUnit.MINUTES)) {
                throw new IllegalStateException("posted operations did not end in 10 minutes");
            }
            slots.release(size);
            check();
        }

        private void check() {
            if (failure != null) {
                throw failure;
            }
        }

        @Override
        public void sent(dev.kvtransfer.api.transport.TransportException f) {
            completed(f);
        }

        @Override
        public void completed(dev.kvtransfer.api.transport.TransportException f) {
            if (f != null) {
                failure = f;
            }
            slots.release();
        }
    }

    /** Parsed command line. */
    static final class Options {
        String role = "compare";
        List<Long> sizes = List.of(1L << 20, 16L << 20, 64L << 20);
        long bytes = 1L << 30;
        int warmup = 3;
        int runs = 3;
        int streams = 1;
        /** Posted sends (and receives on the receiver) kept outstanding per stream; 1: blocking calls. */
        int window = 1;
        int latIters = 20_000;
        List<String> variants = List.of("shm");
        String perftest = "ucx_perftest";
        boolean put;
        int seconds = 5;

        static Options parse(String[] args) {
            Options o = new Options();
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                switch (a) {
                    case "--role" -> o.role = args[++i];
                    case "--sizes" -> {
                        List<Long> s = new ArrayList<>();
                        for (String x : args[++i].split(",")) {
                            s.add(parseSize(x));
                        }
                        o.sizes = s;
                    }
                    case "--bytes" -> o.bytes = parseSize(args[++i]);
                    case "--warmup" -> o.warmup = Integer.parseInt(args[++i]);
                    case "--runs" -> o.runs = Integer.parseInt(args[++i]);
                    case "--streams" -> o.streams = Integer.parseInt(args[++i]);
                    case "--window" -> o.window = Integer.parseInt(args[++i]);
                    case "--lat-iters" -> o.latIters = Integer.parseInt(args[++i]);
                    case "--variants" -> o.variants = List.of(args[++i].split(","));
                    case "--perftest" -> o.perftest = args[++i];
                    case "--no-perftest" -> o.perftest = null;
                    case "--put" -> o.put = true;
                    case "--seconds" -> o.seconds = Integer.parseInt(args[++i]);
                    case "--set" -> {
                        String kv = args[++i];
                        SETTINGS.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
                    }
                    default -> throw new IllegalArgumentException("unknown option " + a + "; see UcxBench javadoc");
                }
            }
            if (!Set.of("compare", "receiver", "idle").contains(o.role)) {
                throw new IllegalArgumentException("--role " + o.role + ": must be compare, receiver or idle");
            }
            return o;
        }

        static long parseSize(String s) {
            String t = s.trim().toLowerCase(Locale.ROOT);
            long mult = 1;
            if (t.endsWith("k")) {
                mult = 1L << 10;
            } else if (t.endsWith("m")) {
                mult = 1L << 20;
            } else if (t.endsWith("g")) {
                mult = 1L << 30;
            }
            if (mult != 1) {
                t = t.substring(0, t.length() - 1);
            }
            return Long.parseLong(t) * mult;
        }
    }
}
