package dev.kvtransfer.crosshost;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A hub namespace holding a bridge and {@code n} spoke namespaces, each joined to the bridge by a veth pair created
 * directly inside the two namespaces (nothing in the host's namespace): the hub has {@code 10.213.<k>.254/24} on
 * the bridge, spoke {@code i} has {@code 10.213.<k>.<i+1>/24}. Every process of an xPyD deployment gets its own
 * namespace and talks to the others over the bridge. {@link #close()} kills any process still inside and deletes
 * every namespace (and with them the devices); a shutdown hook does the same if the test JVM exits without
 * closing, and {@link NetnsPair#sweepStale()} if it was killed.
 */
final class NetnsStar implements AutoCloseable {
    private static final java.util.concurrent.atomic.AtomicInteger SEQ = new java.util.concurrent.atomic.AtomicInteger();
    private final NetnsPair.Side hub;
    private final List<NetnsPair.Side> spokes = new ArrayList<>();
    private final Thread hook = new Thread(this::deleteQuietly, "netns-star-cleanup");
    private boolean closed;

    private NetnsStar(NetnsPair.Side hub) {
        this.hub = hub;
    }

    static NetnsStar create(int n) {
        NetnsPair.sweepStale();
        int k = 100 + SEQ.incrementAndGet() % 150;
        String base = NetnsPair.PREFIX + ProcessHandle.current().pid() + "-star" + k;
        NetnsStar s = new NetnsStar(new NetnsPair.Side(base + "-hub", "br0", "10.213." + k + ".254"));
        Runtime.getRuntime().addShutdownHook(s.hook);
        try {
            run("ip", "netns", "add", s.hub.namespace());
            run("ip", "-n", s.hub.namespace(), "link", "set", "lo", "up");
            run("ip", "-n", s.hub.namespace(), "link", "add", "br0", "type", "bridge");
            run("ip", "-n", s.hub.namespace(), "addr", "add", s.hub.address() + "/24", "dev", "br0");
            run("ip", "-n", s.hub.namespace(), "link", "set", "br0", "up");
            for (int i = 0; i < n; i++) {
                NetnsPair.Side sp = new NetnsPair.Side(base + "-s" + i, "kvt0", "10.213." + k + "." + (i + 1));
                run("ip", "netns", "add", sp.namespace());
                s.spokes.add(sp);
                run("ip", "link", "add", "kvt0", "netns", sp.namespace(), "type", "veth", "peer", "name", "h" + i,
                        "netns", s.hub.namespace());
                run("ip", "-n", sp.namespace(), "addr", "add", sp.address() + "/24", "dev", "kvt0");
                run("ip", "-n", sp.namespace(), "link", "set", "lo", "up");
                run("ip", "-n", sp.namespace(), "link", "set", "kvt0", "up");
                run("ip", "-n", s.hub.namespace(), "link", "set", "h" + i, "master", "br0");
                run("ip", "-n", s.hub.namespace(), "link", "set", "h" + i, "up");
            }
            for (int i = 0; i < n; i++) {
                NetnsPair.awaitRunning(s.spokes.get(i).namespace(), "kvt0");
                NetnsPair.awaitRunning(s.hub.namespace(), "h" + i);
            }
            NetnsPair.awaitRunning(s.hub.namespace(), "br0");
            return s;
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    NetnsPair.Side hub() {
        return hub;
    }

    NetnsPair.Side spoke(int i) {
        return spokes.get(i);
    }

    /**
     * A token bucket on every spoke's veth egress ({@code tc qdisc replace dev kvt0 root tbf rate <rate> burst
     * 256kb latency 50ms}): each instance's link to the bridge is limited both ways through its peers' limits.
     *
     * @param rate e.g. {@code 500mbit}
     */
    void rateLimit(String rate) {
        for (NetnsPair.Side sp : spokes) {
            run("tc", "-n", sp.namespace(), "qdisc", "replace", "dev", sp.device(), "root", "tbf", "rate", rate,
                    "burst", "256kb", "latency", "50ms");
        }
    }

    /**
     * A small token bucket on one spoke's veth egress ({@code tc qdisc replace dev kvt0 root tbf rate <rate> burst
     * <burst> limit <limit>}): what does not fit its queue is dropped, so the link both limits and loses packets
     * (this kernel has no {@code sch_netem}; the drops are counted by the qdisc, see {@link #qdiscStats}).
     *
     * @param i     the spoke
     * @param rate  e.g. {@code 100mbit}
     * @param burst e.g. {@code 16kb}
     * @param limit bytes the queue holds, e.g. {@code 32kb}
     */
    void lossyLink(int i, String rate, String burst, String limit) {
        NetnsPair.Side sp = spokes.get(i);
        run("tc", "-n", sp.namespace(), "qdisc", "replace", "dev", sp.device(), "root", "tbf", "rate", rate, "burst",
                burst, "limit", limit);
    }

    /**
     * @param i the spoke
     * @return {@code tc -s qdisc show dev kvt0} in its namespace (the bucket's {@code Sent … (dropped N, …)} line)
     */
    String qdiscStats(int i) {
        NetnsPair.Side sp = spokes.get(i);
        return run("tc", "-s", "-n", sp.namespace(), "qdisc", "show", "dev", sp.device());
    }

    /**
     * Removes one spoke's root qdisc (back to the default).
     *
     * @param i the spoke
     */
    void clearLink(int i) {
        NetnsPair.Side sp = spokes.get(i);
        run("tc", "-n", sp.namespace(), "qdisc", "del", "dev", sp.device(), "root");
    }

    /** Removes the spokes' token buckets. */
    void clearRateLimit() {
        for (NetnsPair.Side sp : spokes) {
            run("tc", "-n", sp.namespace(), "qdisc", "del", "dev", sp.device(), "root");
        }
    }

    /**
     * Runs a command with a 20 s deadline.
     *
     * @param cmd the command
     * @return its output
     * @throws IllegalStateException naming the command, exit code and output when it fails or overruns
     */
    static String run(String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            p.getOutputStream().close();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            if (!p.waitFor(20, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new IllegalStateException("'" + String.join(" ", cmd) + "' did not exit within 20 s");
            }
            out.write(p.getInputStream().readAllBytes());
            if (p.exitValue() != 0) {
                throw new IllegalStateException("'" + String.join(" ", cmd) + "' failed (exit " + p.exitValue() + "): "
                        + out.toString(StandardCharsets.UTF_8).trim());
            }
            return out.toString(StandardCharsets.UTF_8);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("cannot run " + String.join(" ", cmd), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted: " + String.join(" ", cmd), e);
        }
    }

    private String deleteQuietly() {
        StringBuilder failures = new StringBuilder();
        List<NetnsPair.Side> all = new ArrayList<>(spokes);
        all.add(hub);
        for (NetnsPair.Side s : all) {
            if (Files.exists(Path.of("/run/netns", s.namespace()))) {
                try {
                    // A process left inside (a child the test did not stop) would keep the namespace's network
                    // alive after its name is gone.
                    NetnsPair.killProcessesIn(s.namespace());
                    run("ip", "netns", "del", s.namespace());
                } catch (RuntimeException e) {
                    failures.append(e.getMessage()).append("; ");
                }
            }
        }
        return failures.toString();
    }

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
            // shutting down: the hook runs and finds nothing left
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("removing namespaces: " + failures);
        }
    }
}
