package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.process.ChildJvm;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Bandwidth of our {@link Connection} between two processes next to {@code ucx_perftest -t tag_bw} with the
 * same message sizes, in one run.
 *
 * <p>The sender is this process; the receiver is a forked JVM ({@code --role receiver}). Per size it sends
 * {@code warmup} messages, then {@code count} messages timed from the first send to the receiver's
 * acknowledgement of the last; the receiver checks the last message byte by byte (outside the timing) and the
 * run fails on a mismatch. One blocking send at a time, as the transfer protocol uses a connection. Then
 * {@code ucx_perftest} runs server + client on loopback for each size in three variants: {@code -e -I -E sleep}
 * (error handling, wakeup feature, sleeping wait: how our manager runs), {@code -e} (error handling, busy
 * polling) and plain (UCX's defaults, which may pick shared memory). The UCX transports each side
 * selected are read from {@code UCX_LOG_LEVEL=info} output of the receiver and the perftest client.
 *
 * <p>Usage: {@code UcxBench [--sizes 1m,16m,64m] [--bytes 1g] [--warmup 3] [--perftest ucx_perftest]
 * [--no-perftest] [--registration rcache|explicit] [--spin-micros N]}. Exit code 0 when every transfer verified.
 */
public final class UcxBench {
    private static final int CTRL = 1;
    private static final int DATA = 1 << 10;
    private static final int ACK = (1 << 10) + 1;
    private static final int STATUS = (1 << 10) + 2;

    private static final HostBufferManager MEMORY = new HostBufferManager();

    private UcxBench() {
    }

    private static MemoryBuffer alloc(long bytes) {
        return MEMORY.allocate(bytes, MemoryKind.HOST);
    }

    /**
     * Runs the comparison (default) or the receiver role.
     *
     * @param args see the class comment
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        Options o = Options.parse(args);
        if (o.role.equals("receiver")) {
            receiver(o);
            return;
        }
        if (o.role.equals("idle")) {
            idle(o, System.out);
            return;
        }
        int rc = compare(o, System.out);
        System.exit(rc);
    }

    /**
     * Runs the comparison in this JVM (forking the receiver JVM), for callers such as the cli.
     *
     * @param out  where the lines and the table go
     * @param args the options of the class comment (no {@code --role})
     * @return 0 when every transfer verified, 1 otherwise
     * @throws Exception when the receiver or UCX fails
     */
    public static int run(PrintStream out, String... args) throws Exception {
        Options o = Options.parse(args);
        if (!o.role.equals("compare")) {
            throw new IllegalArgumentException("run() compares; --role " + o.role + " is for main()");
        }
        return compare(o, out);
    }

    // ---------------------------------------------------------------- sender / comparison

    /** One row of the table. */
    record Row(long size, long count, double oursGBs, double perftestSleepGBs, double perftestErrGBs,
               double perftestDefaultGBs) {
    }

    /** The ucx_perftest variants run per size. */
    enum PerftestMode {
        /** Error handling + wakeup feature + sleeping wait: the configuration our manager runs in. */
        LIKE_OURS("-e -I -E sleep", "-e", "-I", "-E", "sleep"),
        /** Error handling, busy polling (perftest's default wait). */
        ERR_POLL("-e", "-e"),
        /** UCX defaults: no error handling (may use shared memory), busy polling. */
        DEFAULT("");

        final String label;
        final List<String> flags;

        PerftestMode(String label, String... flags) {
            this.label = label;
            this.flags = List.of(flags);
        }
    }

    /** Both sides of the bench run with the same manager properties. */
    private static TransportConfig config(String name, Options o) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofMinutes(2))
                .property(UcxSettings.REGISTRATION, o.registration)
                .property(UcxSettings.SPIN_MICROS, Long.toString(o.spinMicros)).build();
    }

    static int compare(Options o, PrintStream out) throws Exception {
        String tls = System.getenv("UCX_TLS");
        out.printf(Locale.ROOT, "UCX_TLS=%s; sizes=%s; bytes per size=%d; warmup=%d; registration=%s; spinMicros=%d%n",
                tls == null ? "(unset: UCX default 'all')" : tls, o.sizes, o.bytes, o.warmup, o.registration,
                o.spinMicros);
        List<Row> rows = new ArrayList<>();
        Set<String> ourTransports = new LinkedHashSet<>();
        boolean allVerified = true;
        TransportConfig cfg = config("bench-sender", o);
        long maxSize = o.sizes.stream().mapToLong(Long::longValue).max().orElse(1);
        try (ChildJvm child = ChildJvm.start(UcxBench.class, "512m", List.of("--role", "receiver",
                "--registration", o.registration, "--spin-micros", Long.toString(o.spinMicros)));
             ConnectionManager m = new UcxTransportProvider().create(cfg)) {
            // UCX logs (UCX_LOG_LEVEL=info, inherited from this process's environment) go to the child's stdout.
            String address = child.awaitLine("ADDRESS ", Duration.ofSeconds(60));
            Connection c = m.connection(address);
            MemoryBuffer buf = alloc(maxSize);
            MemoryBuffer small = alloc(32);
            for (long size : o.sizes) {
                long count = Math.max(4, o.bytes / size);
                fillPattern(buf, size, size);
                ByteBuffer h = small.asByteBuffer();
                h.putLong(0, 1).putLong(8, size).putLong(16, o.warmup).putLong(24, count);
                c.send(CTRL, small, 0, 32);
                for (int i = 0; i < o.warmup; i++) {
                    c.send(DATA, buf, 0, size);
                }
                c.recv(ACK, small, 0, 8);
                long t0 = System.nanoTime();
                for (long i = 0; i < count; i++) {
                    c.send(DATA, buf, 0, size);
                }
                c.recv(ACK, small, 0, 8);
                long ns = System.nanoTime() - t0;
                c.recv(STATUS, small, 0, 8);
                boolean ok = small.asByteBuffer().getLong(0) == 1;
                allVerified &= ok;
                double gbs = (double) size * count / ns;
                out.printf(Locale.ROOT, "ours                     %9s x %5d: %7.3f GB/s%s%n", human(size), count, gbs,
                        ok ? " (last message verified)" : " VERIFICATION FAILED");
                rows.add(new Row(size, count, gbs, Double.NaN, Double.NaN, Double.NaN));
            }
            ByteBuffer h = small.asByteBuffer();
            h.putLong(0, 0).putLong(8, 0).putLong(16, 0).putLong(24, 0);
            c.send(CTRL, small, 0, 32);
            child.awaitLine("BYE", Duration.ofSeconds(30));
            for (String l : child.seen()) {
                String t = transports(l);
                if (t != null) {
                    ourTransports.add(t);
                }
            }
        }
        java.util.Map<PerftestMode, Set<String>> perfTransports = new java.util.EnumMap<>(PerftestMode.class);
        for (PerftestMode pm : PerftestMode.values()) {
            perfTransports.put(pm, new LinkedHashSet<>());
        }
        if (o.perftest != null) {
            for (int i = 0; i < rows.size(); i++) {
                Row r = rows.get(i);
                double sleep = perftest(o, r.size, r.count, PerftestMode.LIKE_OURS,
                        perfTransports.get(PerftestMode.LIKE_OURS), out);
                double poll = perftest(o, r.size, r.count, PerftestMode.ERR_POLL,
                        perfTransports.get(PerftestMode.ERR_POLL), out);
                double dflt = perftest(o, r.size, r.count, PerftestMode.DEFAULT,
                        perfTransports.get(PerftestMode.DEFAULT), out);
                rows.set(i, new Row(r.size, r.count, r.oursGBs, sleep, poll, dflt));
            }
        }
        out.println();
        out.println("| size | messages | ours: Connection (GB/s) | perftest -e -I -E sleep (GB/s) | ours/that "
                + "| perftest -e (GB/s) | ours/that | perftest default (GB/s) | ours/that |");
        out.println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (Row r : rows) {
            out.printf(Locale.ROOT, "| %s | %d | %.3f | %s | %s | %s | %s | %s | %s |%n", human(r.size), r.count,
                    r.oursGBs, fmt(r.perftestSleepGBs), ratio(r.oursGBs, r.perftestSleepGBs),
                    fmt(r.perftestErrGBs), ratio(r.oursGBs, r.perftestErrGBs), fmt(r.perftestDefaultGBs),
                    ratio(r.oursGBs, r.perftestDefaultGBs));
        }
        out.println();
        out.println("transports (UCX_LOG_LEVEL=info ep_cfg lines):");
        out.println("  ours (receiver side):              " + ourTransports);
        for (PerftestMode pm : PerftestMode.values()) {
            out.printf(Locale.ROOT, "  ucx_perftest %-22s %s%n", pm.label.isEmpty() ? "(default):" : pm.label + ":",
                    perfTransports.get(pm));
        }
        out.println(allVerified ? "all transfers verified" : "VERIFICATION FAILED");
        return allVerified ? 0 : 1;
    }

    private static CompletableFuture<List<String>> collect(InputStream in) {
        return collect(new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8)));
    }

    private static CompletableFuture<List<String>> collect(BufferedReader reader) {
        return async(() -> {
            List<String> lines = new ArrayList<>();
            try (BufferedReader r = reader) {
                for (String l; (l = r.readLine()) != null; ) {
                    lines.add(l);
                }
            } catch (IOException e) {
                lines.add("(read failed: " + e + ")");
            }
            return lines;
        });
    }

    /** Runs a blocking reader on its own daemon thread (not the common pool, which may have one thread). */
    private static <T> CompletableFuture<T> async(java.util.function.Supplier<T> s) {
        CompletableFuture<T> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                f.complete(s.get());
            } catch (RuntimeException e) {
                f.completeExceptionally(e);
            }
        }, "ucx-bench-reader");
        t.setDaemon(true);
        t.start();
        return f;
    }

    private static final Pattern EP_CFG = Pattern.compile("ep_cfg\\[\\d+\\]: (.*)$");

    private static String transports(String logLine) {
        Matcher m = EP_CFG.matcher(logLine);
        return m.find() ? m.group(1).trim() : null;
    }

    private static final Pattern FINAL = Pattern.compile("^\\s*(\\d+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+"
            + "([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)\\s+([\\d.]+)(\\s|$)");

    /** Runs one ucx_perftest pair; returns GB/s (NaN when it failed). */
    private static double perftest(Options o, long size, long count, PerftestMode mode, Set<String> tls,
                                   PrintStream out) throws Exception {
        for (int attempt = 0; attempt < 3; attempt++) {
            int port;
            try (ServerSocket s = new ServerSocket(0)) {
                port = s.getLocalPort();
            }
            List<String> common = new ArrayList<>(List.of("-p", String.valueOf(port), "-f"));
            common.addAll(mode.flags);
            List<String> server = new ArrayList<>(List.of(o.perftest));
            server.addAll(common);
            Process sp = new ProcessBuilder(server).redirectErrorStream(true).start();
            CompletableFuture<List<String>> sOut = collect(sp.getInputStream());
            // The server has no readiness signal; the client is retried when it could not connect.
            Thread.sleep(300);
            List<String> client = new ArrayList<>(List.of(o.perftest, "127.0.0.1", "-t", "tag_bw", "-s",
                    String.valueOf(size), "-n", String.valueOf(count), "-w", String.valueOf(o.warmup)));
            client.addAll(common);
            ProcessBuilder cpb = new ProcessBuilder(client).redirectErrorStream(true);
            cpb.environment().put("UCX_LOG_LEVEL", "info");
            Process cp = cpb.start();
            List<String> lines = collect(cp.getInputStream()).get(300, TimeUnit.SECONDS);
            cp.waitFor(30, TimeUnit.SECONDS);
            if (!sp.waitFor(30, TimeUnit.SECONDS)) {
                sp.destroyForcibly();
            }
            sOut.get(30, TimeUnit.SECONDS);
            for (String l : lines) {
                String t = transports(l);
                if (t != null) {
                    tls.add(t);
                }
                Matcher m = FINAL.matcher(l);
                if (m.lookingAt()) { // UCX info logging may continue on the same line
                    double mbs = Double.parseDouble(m.group(6)); // bandwidth overall, MB/s with MB = 2^20 bytes
                    double gbs = mbs * 1048576.0 / 1e9;
                    out.printf(Locale.ROOT, "perftest %-15s %9s x %5d: %7.3f GB/s%n", mode.label, human(size),
                            count, gbs);
                    return gbs;
                }
            }
            out.println("ucx_perftest attempt " + (attempt + 1) + " gave no result: "
                    + String.join(" / ", lines.subList(Math.max(0, lines.size() - 3), lines.size())));
        }
        return Double.NaN;
    }

    // ---------------------------------------------------------------- idle cost

    /**
     * Two connected managers in this JVM, then {@code seconds} with nothing to do: prints the CPU time their
     * progress threads and the whole process used (a hot spin would show ~100% of a core per manager).
     */
    static void idle(Options o, PrintStream out) throws Exception {
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        try (ConnectionManager a = new UcxTransportProvider().create(TransportConfig.builder().name("idle-a")
                .build());
             ConnectionManager b = new UcxTransportProvider().create(TransportConfig.builder().name("idle-b")
                     .build())) {
            MemoryBuffer m = alloc(8);
            a.connection(b.localAddress()).send(CTRL, m, 0, 8);
            b.recvConnect(CTRL, m, 0, 8).send(CTRL, m, 0, 8);
            a.connection(b.localAddress()).recv(CTRL, m, 0, 8);
            List<Thread> progress = new ArrayList<>();
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (t.getName().startsWith("ucx-progress-idle-")) {
                    progress.add(t);
                }
            }
            long[] cpu0 = new long[progress.size()];
            for (int i = 0; i < cpu0.length; i++) {
                cpu0[i] = mx.getThreadCpuTime(progress.get(i).getId());
            }
            long proc0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            Thread.sleep(o.seconds * 1000L);
            long wall = System.nanoTime() - t0;
            long proc = os.getProcessCpuTime() - proc0;
            for (int i = 0; i < cpu0.length; i++) {
                long used = mx.getThreadCpuTime(progress.get(i).getId()) - cpu0[i];
                out.printf(Locale.ROOT, "%s: %.1f ms CPU over %.1f s idle (%.3f%% of a core)%n",
                        progress.get(i).getName(), used / 1e6, wall / 1e9, 100.0 * used / wall);
            }
            out.printf(Locale.ROOT, "whole process (2 managers, UCX async threads, JVM): %.1f ms CPU over %.1f s"
                    + " (%.3f%% of a core)%n", proc / 1e6, wall / 1e9, 100.0 * proc / wall);
        }
    }

    // ---------------------------------------------------------------- receiver

    private static void receiver(Options o) throws Exception {
        Thread watchdog = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // The parent is alive while stdin is open.
                }
            } catch (IOException e) {
                // EOF.
            }
            Runtime.getRuntime().halt(3);
        }, "parent-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        TransportConfig cfg = config("bench-receiver", o);
        try (ConnectionManager m = new UcxTransportProvider().create(cfg)) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            MemoryBuffer small = alloc(32);
            MemoryBuffer buf = null;
            Connection c = m.recvConnect(CTRL, small, 0, 32, Duration.ofMinutes(2));
            while (true) {
                ByteBuffer h = small.asByteBuffer();
                long op = h.getLong(0);
                long size = h.getLong(8);
                long warmup = h.getLong(16);
                long count = h.getLong(24);
                if (op == 0) {
                    break;
                }
                if (buf == null || buf.size() < size) {
                    buf = alloc(size);
                }
                for (long i = 0; i < warmup; i++) {
                    c.recv(DATA, buf, 0, size);
                }
                c.send(ACK, small, 0, 8);
                for (long i = 0; i < count; i++) {
                    c.recv(DATA, buf, 0, size);
                }
                c.send(ACK, small, 0, 8);
                small.asByteBuffer().putLong(0, checkPattern(buf, size, size) ? 1 : 0);
                c.send(STATUS, small, 0, 8);
                c.recv(CTRL, small, 0, 32, Duration.ofMinutes(5));
            }
        }
        System.out.println("BYE");
        System.out.flush();
        System.exit(0);
    }

    // ---------------------------------------------------------------- helpers

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

    private static String human(long size) {
        if (size % (1 << 20) == 0) {
            return (size >> 20) + " MiB";
        }
        if (size % 1024 == 0) {
            return (size >> 10) + " KiB";
        }
        return size + " B";
    }

    private static String fmt(double v) {
        return Double.isNaN(v) ? "n/a" : String.format(Locale.ROOT, "%.3f", v);
    }

    private static String ratio(double ours, double ref) {
        return Double.isNaN(ref) || ref == 0 ? "n/a" : String.format(Locale.ROOT, "%.2f", ours / ref);
    }

    /** Parsed command line. */
    static final class Options {
        String role = "compare";
        List<Long> sizes = List.of(1L << 20, 16L << 20, 64L << 20);
        long bytes = 1L << 30;
        int warmup = 3;
        String perftest = "ucx_perftest";
        String registration = "rcache";
        long spinMicros = UcxSettings.DEFAULT_SPIN_MICROS;
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
                    case "--perftest" -> o.perftest = args[++i];
                    case "--no-perftest" -> o.perftest = null;
                    case "--registration" -> o.registration = args[++i];
                    case "--spin-micros" -> o.spinMicros = Long.parseLong(args[++i]);
                    case "--seconds" -> o.seconds = Integer.parseInt(args[++i]);
                    default -> throw new IllegalArgumentException("unknown option " + a + "; see UcxBench javadoc");
                }
            }
            if (!o.role.equals("compare") && !o.role.equals("receiver") && !o.role.equals("idle")) {
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
