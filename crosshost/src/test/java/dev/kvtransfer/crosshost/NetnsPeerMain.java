package dev.kvtransfer.crosshost;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.process.ContextInstanceMain;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

/**
 * One side of a cross-host pair, run inside a network namespace ({@code ip netns exec <ns> java ...}): a core
 * {@link LocalInstance} (ranks as threads, the standard formatter) of role {@code ctx} or {@code gen} over the
 * named backend, bound to the namespace's veth address. Driven line by line over stdin, answering on stdout:
 * <ul>
 *   <li>start-up: {@code READY <address of every rank, comma-separated>};</li>
 *   <li>ctx, {@code CTX <id> <prompt>}: allocates, fills with {@link KvPattern}, makes the request ready and prints
 *       {@code PARAMS <id> <base64 ContextPhaseParams>}; when every rank's side ended it frees the blocks and
 *       prints {@code CTXDONE <id> <state per rank, comma-separated>[ | error...]};</li>
 *   <li>gen, {@code GEN <id> <prompt> <base64 ContextPhaseParams>}: allocates, requests on every rank, waits
 *       (bounded by the transfer timeout), verifies <b>every element</b> of every rank against {@link KvPattern},
 *       frees, and prints {@code GENDONE <id> <OK|FAIL> nanos=<request to last rank done> bytes=<KV bytes received>
 *       checked=<elements verified> expected=<elements of the request> mismatches=<n> states=<per rank>
 *       [| first mismatch or error]};</li>
 *   <li>{@code COUNTERS}: {@code COUNTER <label>=<value>} for every media driver system counter of this process
 *       (Aeron only: read from the embedded driver's CnC file), {@code LOSS observations=<n> bytes=<n>} from the
 *       driver's loss report, {@code COUNTER loss generator frames seen|dropped=<n>} (when the driver runs Aeron's
 *       loss generator through {@link CountingLossReceiveChannelEndpointSupplier}; 0 otherwise), then
 *       {@code COUNTERS END};</li>
 *   <li>{@code DROPRATE <rate> <seed>}: Aeron's loss generator of this process drops received data frames at
 *       that rate from now on ({@link CountingLossReceiveChannelEndpointSupplier}, when the driver runs it); answers
 *       {@code DROPRATE <rate>};</li>
 *   <li>the raw TCP baseline of the link: {@code RAWLISTEN <port>} (generation side: listens on its host, answers
 *       {@code RAWLISTENING}, then for each connection reads to its end and prints {@code RAWRECEIVED <bytes>
 *       <nanos from accept to end>}); {@code RAWSEND <host> <port> <bytes>} (context side: connects, writes that
 *       many bytes from a direct buffer, closes, prints {@code RAWSENT <bytes>});</li>
 *   <li>{@code ERRORS}: {@code ERRORS <n>}, the background errors the instance's error handler got so far (each
 *       is also printed when it happens: {@code BACKGROUND <error>}, and its stack goes to stderr);</li>
 *   <li>{@code EXIT}: closes the instance (which fails on leaked buffers), prints {@code CLOSED}, exits 0.</li>
 * </ul>
 * Stdin reaching its end (the test JVM died) halts the process at once, so no child outlives a test run.
 *
 * <p>Arguments: {@code <ctx|gen> <backend> <state spec> <blocksPerRank> <host> [key=value...]}; the spec is
 * {@link ContextInstanceMain#state(String)}'s; every {@code key=value} goes to the transport config and to
 * {@link TransceiverConfig#fromProperties(Map)}. Exit code 1 with a stack trace on stderr on any failure.
 */
public final class NetnsPeerMain {
    private static final AtomicLong BACKGROUND_ERRORS = new AtomicLong();

    private NetnsPeerMain() {
    }

    /**
     * Entry point.
     *
     * @param args see the class comment
     */
    public static void main(String[] args) {
        try {
            run(args);
            System.out.println("CLOSED");
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.println("FAILED " + e);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String role = args[0];
        String backend = args[1];
        CacheState state = ContextInstanceMain.state(args[2]);
        int blocksPerRank = Integer.parseInt(args[3]);
        String host = args[4];
        Map<String, String> props = new LinkedHashMap<>();
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        Plugins plugins = Plugins.discover();
        TransportConfig tc = TransportConfig.builder().host(host).properties(props).build();
        TransceiverConfig config = TransceiverConfig.fromProperties(props).toBuilder().backend(backend).build();
        try (LocalInstance inst = LocalInstance.builder(role + "-netns", state)
                .transport(plugins.transport(backend), tc).formatter(plugins.formatterFor(state.attentionType()))
                .config(config).blocksPerRank(blocksPerRank).errorHandler(e -> {
                    // Counted and printed; the test asks for the count (ERRORS) before it lets the pair close.
                    e.printStackTrace();
                    BACKGROUND_ERRORS.incrementAndGet();
                    String text = String.valueOf(e).replace('\n', ' ');
                    System.out.println("BACKGROUND " + text.substring(0, Math.min(text.length(), 500)));
                    System.out.flush();
                }).start()) {
            System.out.println("READY " + String.join(",", inst.commState().addresses()));
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; ; ) {
                line = in.readLine();
                if (line == null) {
                    Runtime.getRuntime().halt(3); // the test JVM is gone
                }
                String[] w = line.trim().split(" ");
                switch (w[0]) {
                    case "EXIT" -> {
                        return;
                    }
                    case "CTX" -> serve(inst, Long.parseLong(w[1]), Integer.parseInt(w[2]));
                    case "GEN" -> receive(inst, config, Long.parseLong(w[1]), Integer.parseInt(w[2]), w[3]);
                    case "DROPRATE" -> {
                        CountingLossReceiveChannelEndpointSupplier.setRate(Double.parseDouble(w[1]),
                                Long.parseLong(w[2]));
                        System.out.println("DROPRATE " + w[1]);
                        System.out.flush();
                    }
                    case "RAWLISTEN" -> rawListen(host, Integer.parseInt(w[1]));
                    case "RAWSEND" -> rawSend(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]));
                    case "ERRORS" -> {
                        System.out.println("ERRORS " + BACKGROUND_ERRORS.get());
                        System.out.flush();
                    }
                    case "COUNTERS" -> {
                        if (backend.equals("aeron")) {
                            AeronDriverCounters.print(System.out);
                            CountingLossReceiveChannelEndpointSupplier.print(System.out);
                        }
                        System.out.println("COUNTERS END");
                        System.out.flush();
                    }
                    default -> throw new IllegalArgumentException("unknown command '" + line + "'");
                }
            }
        }
    }

    private static void serve(LocalInstance ctx, long id, int prompt) {
        CacheState s = ctx.cacheState();
        int totalBlocks = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        for (int r = 0; r < ctx.ranks(); r++) {
            int n = BlockDistribution.count(totalBlocks, s.contextParallelism(), s.cpRank(r));
            int[] ids = ctx.cache(r).allocate(id, n);
            KvPattern.fill(ctx.cache(r), ids, ctx.cacheState(r), r, id, totalBlocks);
            reqs.add(TransferRequest.context(id, prompt, ids));
        }
        for (int r = 0; r < ctx.ranks(); r++) {
            ctx.transceiver(r).respondAndSendAsync(reqs.get(r));
        }
        CompletableFuture.allOf(reqs.stream().map(q -> q.completion().toCompletableFuture())
                .toArray(CompletableFuture[]::new)).handle((v, e) -> {
                    for (int r = 0; r < ctx.ranks(); r++) {
                        ctx.cache(r).free(id);
                    }
                    System.out.println("CTXDONE " + id + " " + reqs.stream().map(q -> q.state().name())
                            .collect(Collectors.joining(",")) + errors(reqs));
                    System.out.flush();
                    return null;
                });
        byte[] params = ctx.contextPhaseParams(id, 0).toBytes();
        System.out.println("PARAMS " + id + " " + Base64.getEncoder().encodeToString(params));
        System.out.flush();
    }

    private static void receive(LocalInstance gen, TransceiverConfig config, long id, int prompt, String b64) {
        ContextPhaseParams params = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(b64));
        CacheState s = gen.cacheState();
        int total = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        long t0 = System.nanoTime();
        for (int r = 0; r < gen.ranks(); r++) {
            int[] ids = gen.cache(r).allocate(id, BlockDistribution.count(total, s.contextParallelism(), s.cpRank(r)));
            TransferRequest q = TransferRequest.generation(params, prompt, ids);
            reqs.add(q);
            gen.transceiver(r).requestAndReceiveAsync(q);
        }
        CompletableFuture<Void> all = CompletableFuture.allOf(reqs.stream()
                .map(q -> q.completion().toCompletableFuture()).toArray(CompletableFuture[]::new));
        String waitError = "";
        try {
            // Bounded: the transceiver fails each request within its own transfer timeout; this is the backstop.
            all.get(config.kvTransferTimeout().toMillis() + 10_000, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            waitError = " | " + e.getCause(); // the request's own error is reported below
        } catch (java.util.concurrent.TimeoutException e) {
            waitError = " | no end within " + (config.kvTransferTimeout().toMillis() + 10_000) + " ms";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            waitError = " | interrupted";
        }
        long nanos = System.nanoTime() - t0;
        long bytes = 0;
        long checked = 0;
        long expected = 0;
        long mismatches = 0;
        String first = "";
        boolean ok = waitError.isEmpty();
        for (int r = 0; r < reqs.size(); r++) {
            TransferRequest q = reqs.get(r);
            BlockLayout l = gen.cache(r).layout();
            long elements = (long) q.blockIds().length * l.localLayers() * l.kvFactor() * l.localHeads()
                    * l.tokensPerBlock() * l.sizePerHead();
            expected += elements;
            bytes += elements * s.dataType().bytes();
            if (q.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                ok = false;
                continue;
            }
            KvPattern.Result v = KvPattern.verify(gen.cache(r), q.blockIds(), gen.cacheState(r), r, id, total);
            checked += v.checkedElements();
            mismatches += v.mismatches();
            if (!v.ok() && first.isEmpty()) {
                first = " | rank " + r + ": " + v.firstMismatch();
            }
        }
        ok &= mismatches == 0 && checked == expected;
        for (int r = 0; r < reqs.size(); r++) {
            gen.cache(r).free(id);
        }
        System.out.println("GENDONE " + id + " " + (ok ? "OK" : "FAIL") + " nanos=" + nanos + " bytes=" + bytes
                + " checked=" + checked + " expected=" + expected + " mismatches=" + mismatches + " states="
                + reqs.stream().map(q -> q.state().name()).collect(Collectors.joining(",")) + first + waitError
                + errors(reqs));
        System.out.flush();
    }

    /** The raw baseline's receiver: a thread that accepts, reads each stream to its end and reports it. */
    private static void rawListen(String host, int port) throws IOException {
        ServerSocketChannel server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress(host, port));
        Thread t = new Thread(() -> {
            ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
            try (server) {
                while (true) {
                    try (SocketChannel c = server.accept()) {
                        long t0 = System.nanoTime();
                        long n = 0;
                        for (int r; (r = c.read(buf.clear())) >= 0; ) {
                            n += r;
                        }
                        System.out.println("RAWRECEIVED " + n + " " + (System.nanoTime() - t0));
                        System.out.flush();
                    }
                }
            } catch (IOException e) {
                System.out.println("RAWRECEIVED -1 0 " + e);
                System.out.flush();
            }
        }, "raw-tcp-sink");
        t.setDaemon(true);
        t.start();
        System.out.println("RAWLISTENING");
        System.out.flush();
    }

    /** The raw baseline's sender: one connection, {@code bytes} from a direct buffer, closed. */
    private static void rawSend(String host, int port, long bytes) throws IOException {
        ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
        try (SocketChannel c = SocketChannel.open(new InetSocketAddress(host, port))) {
            for (long left = bytes; left > 0; ) {
                buf.clear().limit((int) Math.min(buf.capacity(), left));
                while (buf.hasRemaining()) {
                    left -= c.write(buf);
                }
            }
        }
        System.out.println("RAWSENT " + bytes);
        System.out.flush();
    }

    private static String errors(List<TransferRequest> reqs) {
        return reqs.stream().flatMap(q -> q.error().stream()).map(x -> " | " + x.getMessage())
                .collect(Collectors.joining());
    }
}
