package dev.kvtransfer.crosshost;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Two network namespaces of our own, {@code kvt-<pid>-<n>-a} and {@code -b}, joined by a veth pair created
 * directly inside them ({@code ip link add kvt-a netns A type veth peer name kvt-b netns B}: no interface ever
 * exists in the host's namespace), with private addresses {@code 10.211.<n>.1/24} (side a) and {@code .2/24}
 * (side b), {@code lo} and both veth ends up. Nothing outside these two namespaces is touched. {@link #close()}
 * deletes both (which destroys the veth pair); a JVM shutdown hook does the same if the test JVM exits without
 * closing, and {@link #sweepStale()} deletes namespaces of this prefix whose creating process is gone (a JVM
 * that was killed).
 *
 * <p>Every {@code ip}/{@code tc} call has a deadline and fails with the command, exit code and output.
 */
final class NetnsPair implements AutoCloseable {
    /** Prefix of every namespace this class creates. */
    static final String PREFIX = "kvt-";
    private static final Pattern OURS = Pattern.compile("^" + PREFIX + "(\\d+)-(\\d+)-[ab]$");
    /** {@link NetnsStar}'s names: {@code kvt-<pid>-star<k>-hub} and {@code -s<i>}. */
    private static final Pattern STAR = Pattern.compile("^" + PREFIX + "(\\d+)-star\\d+-(hub|s\\d+)$");
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final long CMD_TIMEOUT_S = 20;
    /** The probe's answer: "" when namespaces work, else why not; null before the probe. */
    private static String cause;
    /** MTU of the veth ends. */
    static final int MTU = Integer.getInteger("crosshost.mtu", 1500);

    /** One end: its namespace, veth device and address. */
    record Side(String namespace, String device, String address) {
        /** @return the loopback of this side's namespace ({@code lo}, 127.0.0.1): for baselines without the link */
        Side loopback() {
            return new Side(namespace, "lo", "127.0.0.1");
        }
    }

    private final Side a;
    private final Side b;
    private final Thread hook;
    private boolean closed;

    private NetnsPair(Side a, Side b) {
        this.a = a;
        this.b = b;
        this.hook = new Thread(this::deleteQuietly, "netns-cleanup-" + a.namespace());
    }

    /**
     * Why namespace tests cannot run here, or {@code null} when they can: Linux, root (effective uid 0), the
     * {@code ip} and {@code tc} tools, an {@code ip netns add} that works (a container without CAP_SYS_ADMIN
     * refuses it) and a token bucket qdisc in it ({@code sch_tbf}). Probed once per JVM.
     *
     * @return the missing privilege or tool, or {@code null}
     */
    static synchronized String unavailabilityCause() {
        if (cause == null) {
            String c = probe();
            cause = c == null ? "" : c;
        }
        return cause.isEmpty() ? null : cause;
    }

    private static String probe() {
        if (!System.getProperty("os.name", "").toLowerCase(java.util.Locale.ROOT).contains("linux")) {
            return "network namespaces need Linux; this is " + System.getProperty("os.name");
        }
        String uid = effectiveUid();
        if (!"0".equals(uid)) {
            return "network namespaces need root (effective uid 0); this process runs as uid " + uid;
        }
        for (String tool : List.of("ip", "tc")) {
            if (which(tool) == null) {
                return "the '" + tool + "' tool (iproute2) is not on the PATH " + System.getenv("PATH");
            }
        }
        String probe = PREFIX + ProcessHandle.current().pid() + "-" + SEQ.incrementAndGet() + "-a";
        Result r = run(List.of("ip", "netns", "add", probe));
        if (r.code != 0) {
            return "'ip netns add' does not work here (exit " + r.code + "): " + r.output.trim();
        }
        Result t = run(List.of("tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit",
                "burst", "32kb", "latency", "50ms"));
        Result d = run(List.of("ip", "netns", "del", probe));
        if (t.code != 0) {
            return "'tc qdisc add ... tbf' does not work here (exit " + t.code + ", kernel module sch_tbf?): "
                    + t.output.trim();
        }
        if (d.code != 0) {
            return "'ip netns del " + probe + "' failed (exit " + d.code + "): " + d.output.trim();
        }
        return null;
    }

    /**
     * Creates the pair and registers the shutdown hook that removes it.
     *
     * @return the pair, up and addressed
     * @throws IllegalStateException naming the failed command (whatever was created is removed first)
     */
    static NetnsPair create() {
        sweepStale();
        int n = SEQ.incrementAndGet();
        String base = PREFIX + ProcessHandle.current().pid() + "-" + n;
        int subnet = 1 + n % 250;
        NetnsPair p = new NetnsPair(new Side(base + "-a", "kvt-a", "10.211." + subnet + ".1"),
                new Side(base + "-b", "kvt-b", "10.211." + subnet + ".2"));
        Runtime.getRuntime().addShutdownHook(p.hook);
        try {
            ip("netns", "add", p.a.namespace);
            ip("netns", "add", p.b.namespace);
            ip("link", "add", p.a.device, "netns", p.a.namespace, "type", "veth", "peer", "name", p.b.device,
                    "netns", p.b.namespace);
            for (Side s : List.of(p.a, p.b)) {
                ip("-n", s.namespace, "addr", "add", s.address + "/24", "dev", s.device);
                ip("-n", s.namespace, "link", "set", "dev", s.device, "mtu", Integer.toString(MTU));
                ip("-n", s.namespace, "link", "set", "lo", "up");
                ip("-n", s.namespace, "link", "set", s.device, "up");
            }
            for (Side s : List.of(p.a, p.b)) {
                awaitRunning(s.namespace, s.device);
            }
            return p;
        } catch (RuntimeException e) {
            p.close();
            throw e;
        }
    }

    /** @return the context side (a) */
    Side a() {
        return a;
    }

    /** @return the generation side (b) */
    Side b() {
        return b;
    }

    /**
     * Puts a token bucket on both veth ends' egress ({@code tc qdisc replace dev <veth> root tbf rate <rate>
     * burst 256kb latency 50ms}).
     *
     * @param rate e.g. {@code "200mbit"}
     */
    void rateLimit(String rate) {
        Objects.requireNonNull(rate, "rate");
        for (Side s : List.of(a, b)) {
            check(List.of("tc", "-n", s.namespace, "qdisc", "replace", "dev", s.device, "root", "tbf", "rate", rate,
                    "burst", "256kb", "latency", "50ms"));
        }
    }

    /** Removes the rate limit from both ends (back to the veth default qdisc). */
    void clearRateLimit() {
        for (Side s : List.of(a, b)) {
            check(List.of("tc", "-n", s.namespace, "qdisc", "del", "dev", s.device, "root"));
        }
    }

    /**
     * @param s a side
     * @return the qdisc line(s) of its veth, e.g. for the test log ({@code tc -s qdisc show}: sent, dropped,
     *         overlimits)
     */
    String qdisc(Side s) {
        return check(List.of("tc", "-s", "-n", s.namespace, "qdisc", "show", "dev", s.device)).trim()
                .replaceAll("\\s+", " ");
    }

    /**
     * @param s a side
     * @return bytes received and sent and packets dropped on its veth since it was created: {rx bytes, tx bytes,
     *         rx dropped, tx dropped}
     */
    long[] deviceBytes(Side s) {
        String out = check(List.of("ip", "netns", "exec", s.namespace, "cat",
                "/sys/class/net/" + s.device + "/statistics/rx_bytes",
                "/sys/class/net/" + s.device + "/statistics/tx_bytes",
                "/sys/class/net/" + s.device + "/statistics/rx_dropped",
                "/sys/class/net/" + s.device + "/statistics/tx_dropped"));
        String[] w = out.trim().split("\\s+");
        return new long[] {Long.parseLong(w[0]), Long.parseLong(w[1]), Long.parseLong(w[2]), Long.parseLong(w[3])};
    }

    /**
     * What the kernel of a side's namespace dropped: its veth's receive and transmit drops and the UDP
     * layer's receive errors ({@code /proc/net/snmp}: {@code InErrors}, {@code RcvbufErrors}: datagrams lost
     * because a socket's receive buffer was full).
     *
     * @param s a side
     * @return counter name to value since the namespace was created
     */
    Map<String, Long> kernelDrops(Side s) {
        long[] dev = deviceBytes(s);
        Map<String, Long> out = new LinkedHashMap<>();
        out.put("veth rx dropped", dev[2]);
        out.put("veth tx dropped", dev[3]);
        String[] udp = check(List.of("ip", "netns", "exec", s.namespace, "cat", "/proc/net/snmp")).lines()
                .filter(l -> l.startsWith("Udp: ")).toArray(String[]::new);
        if (udp.length == 2) {
            String[] names = udp[0].split("\\s+");
            String[] values = udp[1].split("\\s+");
            for (int i = 1; i < names.length && i < values.length; i++) {
                if (names[i].equals("InErrors") || names[i].equals("RcvbufErrors")) {
                    out.put("udp " + names[i], Long.parseLong(values[i]));
                }
            }
        }
        return out;
    }

    /**
     * The command prefix that runs a program inside a side's namespace.
     *
     * @param s a side
     * @return {@code ip netns exec <namespace>}
     */
    static List<String> exec(Side s) {
        return List.of("ip", "netns", "exec", s.namespace);
    }

    /** @return the namespaces of our prefix that exist now (any process's) */
    static List<String> existing() {
        List<String> out = new ArrayList<>();
        for (String line : check(List.of("ip", "netns", "list")).split("\n")) {
            String name = line.trim().split("\\s+")[0];
            if (name.startsWith(PREFIX)) {
                out.add(name);
            }
        }
        return out;
    }

    /**
     * Deletes namespaces of our prefix whose creating process (the pid in the name) is gone. Namespaces of
     * running processes (another test JVM beside this one) are left alone.
     */
    static void sweepStale() {
        for (String name : existing()) {
            Matcher m = OURS.matcher(name);
            if (!m.matches()) {
                m = STAR.matcher(name);
            }
            if (m.matches() && ProcessHandle.of(Long.parseLong(m.group(1))).isEmpty()) {
                killProcessesIn(name);
                Result r = run(List.of("ip", "netns", "del", name));
                System.out.println("netns: removed stale namespace " + name + " (exit " + r.code + ")");
            }
        }
    }

    /**
     * Kills (SIGKILL) every process inside a namespace ({@code ip netns pids}) and waits for them to end: what a
     * killed test JVM left behind (its children, an etcd) would otherwise keep running in a namespace whose name
     * is gone.
     *
     * @param namespace the namespace
     */
    static void killProcessesIn(String namespace) {
        Result r = run(List.of("ip", "netns", "pids", namespace));
        if (r.code != 0) {
            return;
        }
        for (String pid : r.output.trim().split("\\s+")) {
            if (!pid.isEmpty()) {
                ProcessHandle.of(Long.parseLong(pid)).ifPresent(p -> {
                    p.destroyForcibly();
                    System.out.println("netns: killed pid " + pid + " left in " + namespace);
                    try {
                        p.onExit().get(10, java.util.concurrent.TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
                        System.out.println("netns: pid " + pid + " in " + namespace + " still runs: " + e);
                    }
                });
            }
        }
    }

    /** Deletes both namespaces (and with them the veth pair); idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        String failures = deleteQuietly();
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            // the JVM is already shutting down: the hook runs (and finds nothing left to delete)
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("removing namespaces " + a.namespace + ", " + b.namespace + ": "
                    + failures);
        }
    }

    private String deleteQuietly() {
        StringBuilder failures = new StringBuilder();
        for (Side s : List.of(a, b)) {
            if (Files.exists(Path.of("/run/netns", s.namespace))) {
                killProcessesIn(s.namespace);
                Result r = run(List.of("ip", "netns", "del", s.namespace));
                if (r.code != 0) {
                    failures.append(s.namespace).append(": exit ").append(r.code).append(' ')
                            .append(r.output.trim()).append("; ");
                }
            }
        }
        return failures.toString();
    }

    @Override
    public String toString() {
        return a.namespace + " (" + a.device + " " + a.address + ") <-> " + b.namespace + " (" + b.device + " "
                + b.address + ")";
    }

    /**
     * Waits (at most 20 s) until a device reports its carrier and the state UP. The kernel turns a veth pair's
     * carrier on asynchronously (its link watch may wait up to a second) once both ends are up; a process started
     * before that sees the device without {@code IFF_RUNNING}, and UCX then leaves it out of its worker, so
     * endpoints to the peer fail "Destination is unreachable".
     *
     * @param namespace the namespace
     * @param device    the device in it
     */
    static void awaitRunning(String namespace, String device) {
        org.awaitility.Awaitility.await("carrier of " + device + " in " + namespace)
                .atMost(java.time.Duration.ofSeconds(20)).pollInterval(java.time.Duration.ofMillis(20))
                .until(() -> {
                    String line = check(List.of("ip", "-n", namespace, "-o", "link", "show", "dev", device));
                    return line.contains("LOWER_UP") && line.contains("state UP");
                });
    }

    private static void ip(String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add("ip");
        cmd.addAll(List.of(args));
        check(cmd);
    }

    private static String check(List<String> cmd) {
        Result r = run(cmd);
        if (r.code != 0) {
            throw new IllegalStateException("'" + String.join(" ", cmd) + "' failed (exit " + r.code + "): "
                    + r.output.trim());
        }
        return r.output;
    }

    private record Result(int code, String output) {
    }

    private static Result run(List<String> cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectInput(ProcessBuilder.Redirect.PIPE)
                    .start();
            p.getOutputStream().close();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            Thread reader = new Thread(() -> copy(p.getInputStream(), out), "netns-cmd-output");
            reader.setDaemon(true);
            reader.start();
            if (!p.waitFor(CMD_TIMEOUT_S, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return new Result(-1, "no exit within " + CMD_TIMEOUT_S + " s");
            }
            reader.join(TimeUnit.SECONDS.toMillis(5));
            synchronized (out) {
                return new Result(p.exitValue(), out.toString(StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            return new Result(-1, "cannot run " + cmd.get(0) + ": " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return new Result(-1, "interrupted");
        }
    }

    private static void copy(InputStream in, ByteArrayOutputStream out) {
        byte[] buf = new byte[4096];
        try (in) {
            for (int n; (n = in.read(buf)) > 0; ) {
                synchronized (out) {
                    out.write(buf, 0, n);
                }
            }
        } catch (IOException e) {
            // the process ended; what was read is kept
        }
    }

    private static String which(String tool) {
        for (String dir : System.getenv().getOrDefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":")) {
            Path p = Path.of(dir, tool);
            if (Files.isExecutable(p)) {
                return p.toString();
            }
        }
        return null;
    }

    private static String effectiveUid() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("Uid:")) {
                    return line.substring(4).trim().split("\\s+")[1]; // real, effective, saved, fs
                }
            }
        } catch (IOException e) {
            return "unknown (" + e.getMessage() + ")";
        }
        return "unknown";
    }
}
