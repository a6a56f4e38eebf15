package dev.kvtransfer.crosshost;

import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.TransceiverConfig;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A context process in side a of a {@link NetnsPair} and a generation process in side b ({@link NetnsPeerMain}
 * each, bound to its namespace's veth address, sharing the deployment secret), and the transfers between them:
 * every one filled with {@code KvPattern} on the context side and verified element by element on the generation
 * side. {@link #close()} kills both processes (a clean end is {@link #finish()}).
 */
final class CrossHostPair implements AutoCloseable {
    /** Bound of every wait for a child (start-up, a transfer's answer). */
    static final Duration WAIT = Duration.ofSeconds(60);
    /** Context TP2 → generation PP2: heads split on one side, layers on the other (staging on both sides). */
    static final String CTX_SPEC = "2,1,8,8,64,16,FLOAT16";
    static final String GEN_SPEC = "1,2,8,8,64,16,FLOAT16";
    /** Tokens of one 8 MiB request: 32 blocks of 256 KiB (8 layers x 2 x 8 heads x 16 tokens x 64 dims x 2 B). */
    static final int PROMPT_8MIB = 16 * 32;
    static final int BLOCKS_PER_RANK = 80;
    /** Port of the raw TCP baseline's receiver (inside our own namespace: nothing else listens there). */
    static final int RAW_PORT = 5201;

    private final String label;
    private final NetnsPair net;
    private final NetnsPair.Side ctxSide;
    private final NetnsPair.Side genSide;
    private final String backend;
    private final NetnsJvm ctx;
    private final NetnsJvm gen;
    private long nextId = 1000;
    private boolean rawListening;

    /** One verified transfer as the generation process measured it (request to the last rank done). */
    record Transfer(long id, long nanos, long bytes, long checked) {
        double gbPerSecond() {
            return bytes / (double) nanos;
        }
    }

    private CrossHostPair(NetnsPair net, NetnsPair.Side ctxSide, NetnsPair.Side genSide, String backend,
                          NetnsJvm ctx, NetnsJvm gen, String label) {
        this.label = label;
        this.net = net;
        this.ctxSide = ctxSide;
        this.genSide = genSide;
        this.backend = backend;
        this.ctx = ctx;
        this.gen = gen;
    }

    /**
     * Starts both processes (concurrently) and waits until both listen on their side's veth address.
     *
     * @param net      the namespaces
     * @param backend  transport name
     * @param label    names the logs
     * @param props    transport / transceiver properties of both sides
     * @param ctxProps extra properties of the context side only
     * @param genProps extra properties of the generation side only
     * @param jvmProps {@code -D} settings of both JVMs (e.g. Aeron's loss generator)
     * @param secret   the deployment's shared secret file
     * @return the running pair
     * @throws IOException if a process cannot start
     */
    static CrossHostPair start(NetnsPair net, String backend, String label, Map<String, String> props,
                               Map<String, String> ctxProps, Map<String, String> genProps, List<String> jvmProps,
                               Path secret) throws IOException {
        return start(net, net.a(), net.b(), backend, label, props, ctxProps, genProps, jvmProps, secret);
    }

    /**
     * Starts both processes on explicit sides (e.g. both on side a's loopback, for the baseline without the link).
     *
     * @param net     the namespaces (for diagnostics)
     * @param ctxSide where the context process runs and listens
     * @param genSide where the generation process runs and listens
     * @param backend  transport name
     * @param label    names the logs
     * @param props    transport / transceiver properties of both sides
     * @param ctxProps extra properties of the context side only
     * @param genProps extra properties of the generation side only
     * @param jvmProps {@code -D} settings of both JVMs
     * @param secret   the deployment's shared secret file
     * @return the running pair
     * @throws IOException if a process cannot start
     */
    static CrossHostPair start(NetnsPair net, NetnsPair.Side ctxSide, NetnsPair.Side genSide, String backend,
                               String label, Map<String, String> props, Map<String, String> ctxProps,
                               Map<String, String> genProps, List<String> jvmProps, Path secret)
            throws IOException {
        Path logs = Path.of("target", "netns-logs");
        Map<String, String> common = new TreeMap<>(props);
        common.put(TransceiverConfig.P_AUTH_SECRET_FILE, secret.toString());
        common.put(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, "30000");
        common.put(TransceiverConfig.P_TRANSFER_BUFFER_BYTES, Integer.toString(4 << 20));
        common.put(TransceiverConfig.P_CHUNK_BYTES, Integer.toString(1 << 20));
        NetnsJvm c = null;
        NetnsJvm g = null;
        long t0 = System.nanoTime();
        try {
            c = NetnsJvm.start(ctxSide, label + "-ctx", NetnsPeerMain.class, jvmProps,
                    args("ctx", backend, CTX_SPEC, ctxSide.address(), common, ctxProps), logs);
            g = NetnsJvm.start(genSide, label + "-gen", NetnsPeerMain.class, jvmProps,
                    args("gen", backend, GEN_SPEC, genSide.address(), common, genProps), logs);
            CrossHostPair p = new CrossHostPair(net, ctxSide, genSide, backend, c, g, label);
            p.assertListensOn(c, ctxSide);
            p.assertListensOn(g, genSide);
            report("CROSSHOST " + label + " pair started (both READY) in " + (System.nanoTime() - t0) / 1_000_000
                    + " ms");
            return p;
        } catch (IOException | RuntimeException | Error e) {
            if (c != null) {
                c.close();
            }
            if (g != null) {
                g.close();
            }
            throw e;
        }
    }

    private static List<String> args(String role, String backend, String spec, String host,
                                     Map<String, String> common, Map<String, String> own) {
        List<String> a = new ArrayList<>(List.of(role, backend, spec, Integer.toString(BLOCKS_PER_RANK), host));
        Map<String, String> all = new TreeMap<>(common);
        all.putAll(own);
        all.forEach((k, v) -> a.add(k + "=" + v));
        return a;
    }

    private void assertListensOn(NetnsJvm child, NetnsPair.Side side) {
        String addresses = child.awaitLine("READY ", WAIT);
        // Every rank's endpoint is the namespace's veth address: nothing binds 127.0.0.1 or a host address.
        assertThat(addresses.split(",")).as("%s rank addresses", child.name()).hasSize(2)
                .allSatisfy(a -> assertThat(a).startsWith(side.address() + ":"));
    }

    /**
     * One request: the context process fills and makes it ready, the generation process receives and verifies
     * every element; both sides must end complete.
     *
     * @param prompt prompt length in tokens
     * @return what the generation side measured
     * @throws IOException if a child's stdin is closed
     */
    Transfer transfer(int prompt) throws IOException {
        long id = nextId++;
        ctx.tell("CTX " + id + " " + prompt);
        String params = ctx.awaitLine("PARAMS " + id + " ", WAIT);
        CommState comm = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(params)).contextState().commState();
        // What the generation side dials is the context side's address (its namespace's veth).
        assertThat(comm.addresses()).allSatisfy(a -> assertThat(a).startsWith(ctxSide.address() + ":"));
        gen.tell("GEN " + id + " " + prompt + " " + params);
        String done = gen.awaitLine("GENDONE " + id + " ", WAIT);
        if (!done.startsWith("OK ")) {
            throw new AssertionError("generation side of request " + id + " over " + backend + " (" + net + "): "
                    + done + "\n" + diagnostics(id));
        }
        Map<String, String> f = fields(done);
        assertThat(f.get("checked")).as("elements verified of request %d: %s", id, done).isEqualTo(f.get("expected"));
        assertThat(Long.parseLong(f.get("checked"))).as("elements verified").isPositive();
        assertThat(f.get("states")).isEqualTo("GENERATION_TRANS_COMPLETE,GENERATION_TRANS_COMPLETE");
        String ctxDone = ctx.awaitLine("CTXDONE " + id + " ", WAIT);
        assertThat(ctxDone).as("context side of request %d", id).isEqualTo("CONTEXT_COMPLETE,CONTEXT_COMPLETE");
        return new Transfer(id, Long.parseLong(f.get("nanos")), Long.parseLong(f.get("bytes")),
                Long.parseLong(f.get("checked")));
    }

    /**
     * Runs {@code count} transfers of one prompt length and reports their times (printed and appended to
     * {@code target/crosshost-times.txt}); no speed is asserted.
     *
     * @param variant what runs, e.g. {@code "aeron-udp 200mbit loss 1%"}
     * @param count   transfers
     * @param prompt  tokens each
     * @return the transfers
     * @throws IOException if a child's stdin is closed
     */
    List<Transfer> measure(String variant, int count, int prompt) throws IOException {
        long t0 = System.nanoTime();
        List<Transfer> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            out.add(transfer(prompt));
        }
        report(summary(variant, out.stream().map(Transfer::nanos).toList(), out.get(0).bytes(),
                System.nanoTime() - t0));
        return out;
    }

    /**
     * The raw baseline of the link, measured in the same run as ours: {@code count} plain TCP streams of
     * {@code bytes} from the context process to the generation process (one connection each, direct buffers, no
     * verification), timed on the receiving side from accept to end of stream; reported like ours.
     *
     * @param variant e.g. {@code "raw-tcp veth 200mbit"}
     * @param count   streams
     * @param bytes   bytes each
     * @return receive time of each, ns
     * @throws IOException if a child's stdin is closed
     */
    List<Long> rawTcp(String variant, int count, long bytes) throws IOException {
        if (!rawListening) {
            gen.tell("RAWLISTEN " + RAW_PORT);
            gen.awaitLine("RAWLISTENING", WAIT);
            rawListening = true;
        }
        long t0 = System.nanoTime();
        List<Long> nanos = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            ctx.tell("RAWSEND " + genSide.address() + " " + RAW_PORT + " " + bytes);
            String[] w = gen.awaitLine("RAWRECEIVED ", WAIT).split(" ");
            assertThat(Long.parseLong(w[0])).as("raw bytes received (%s)", String.join(" ", w)).isEqualTo(bytes);
            nanos.add(Long.parseLong(w[1]));
            ctx.awaitLine("RAWSENT " + bytes, WAIT);
        }
        report(summary(variant, nanos, bytes, System.nanoTime() - t0));
        return nanos;
    }

    /**
     * Sets the receive loss of Aeron's loss generator in both processes (they must run
     * {@link CountingLossReceiveChannelEndpointSupplier}).
     *
     * @param rate fraction of received data frames dropped from now on, 0 for none
     * @param seed the generator's seed
     * @throws IOException if a child's stdin is closed
     */
    void dropRate(double rate, long seed) throws IOException {
        for (NetnsJvm c : List.of(ctx, gen)) {
            c.tell("DROPRATE " + rate + " " + seed);
            c.awaitLine("DROPRATE ", WAIT);
        }
    }

    /**
     * One report line: transfer times and rates, min / median / max.
     *
     * @param variant what ran
     * @param nanos   each transfer's time
     * @param bytes   bytes of each transfer
     * @param wall    the whole variant's time, ns
     * @return the line
     */
    static String summary(String variant, List<Long> nanos, long bytes, long wall) {
        long[] ms = nanos.stream().mapToLong(n -> n / 1_000_000).sorted().toArray();
        double[] gbs = nanos.stream().mapToDouble(n -> bytes / (double) n).sorted().toArray();
        return String.format(Locale.ROOT,
                "CROSSHOST %-34s %d x %.1f MiB: ms min/median/max %d/%d/%d, GB/s min/median/max "
                        + "%.4f/%.4f/%.4f, variant wall %d ms", variant, nanos.size(), bytes / 1048576.0,
                ms[0], ms[ms.length / 2], ms[ms.length - 1], gbs[0], gbs[gbs.length / 2], gbs[gbs.length - 1],
                wall / 1_000_000);
    }

    /**
     * Prints a report line and appends it to {@code target/crosshost-times.txt}.
     *
     * @param line the line
     */
    static void report(String line) {
        System.out.println(line);
        try {
            Path file = Path.of("target", "crosshost-times.txt");
            Files.createDirectories(file.getParent());
            Files.writeString(file, java.time.Instant.now() + " " + line + System.lineSeparator(),
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** What both sides can still tell about a failed request: the context side's end, counters, the link. */
    private String diagnostics(long id) {
        StringBuilder b = new StringBuilder();
        try {
            b.append("context side: ").append(ctx.awaitLine("CTXDONE " + id + " ", Duration.ofSeconds(10)));
        } catch (RuntimeException e) {
            b.append("context side: no CTXDONE (").append(e.getMessage(), 0, Math.min(300, e.getMessage().length()))
                    .append(')');
        }
        try {
            b.append("\ncontext counters: ").append(ctx.counters(Duration.ofSeconds(10)));
            b.append("\ngeneration counters: ").append(gen.counters(Duration.ofSeconds(10)));
            b.append("\nqdisc a: ").append(net.qdisc(net.a())).append("\nqdisc b: ").append(net.qdisc(net.b()));
        } catch (IOException | RuntimeException e) {
            b.append("\n(diagnostics incomplete: ").append(e).append(')');
        }
        return b.toString();
    }

    /** @return the context process's counters (Aeron: its media driver's system counters) */
    Map<String, Long> contextCounters() throws IOException {
        return ctx.counters(WAIT);
    }

    /** @return the generation process's counters */
    Map<String, Long> generationCounters() throws IOException {
        return gen.counters(WAIT);
    }

    /**
     * Neither process had a background error during its life so far; then both close their instances at once
     * (leak-checked) and exit 0. Background errors while the two close (a peer going away under the other's
     * close) are reported, not failed on.
     */
    void finish() throws IOException {
        for (NetnsJvm c : List.of(ctx, gen)) {
            c.tell("ERRORS");
            String n = c.awaitLine("ERRORS ", WAIT);
            assertThat(n).as("background errors of %s: %s", c.name(), c.drainLines("BACKGROUND ")).isEqualTo("0");
        }
        long t0 = System.nanoTime();
        gen.tell("EXIT");
        ctx.tell("EXIT");
        assertThat(gen.awaitExit(WAIT)).as("generation process exit code").isZero();
        assertThat(ctx.awaitExit(WAIT)).as("context process exit code").isZero();
        report("CROSSHOST " + label + " pair closed and exited in " + (System.nanoTime() - t0) / 1_000_000 + " ms");
        for (NetnsJvm c : List.of(ctx, gen)) {
            List<String> closing = c.drainLines("BACKGROUND ");
            if (!closing.isEmpty()) {
                report("CROSSHOST " + c.name() + " background errors while the pair closed: " + closing);
            }
        }
    }

    private static Map<String, String> fields(String line) {
        Map<String, String> f = new TreeMap<>();
        Arrays.stream(line.split(" \\| ")[0].split(" ")).filter(w -> w.contains("="))
                .forEach(w -> f.put(w.substring(0, w.indexOf('=')), w.substring(w.indexOf('=') + 1)));
        return f;
    }

    @Override
    public void close() {
        gen.close();
        ctx.close();
    }
}
