package dev.kvtransfer.crosshost;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * What every cross-host test class shares: the skip where namespaces cannot be made (with the reason), the
 * deployment secret both processes read ({@code kvtransfer.authSecretFile}; authentication is on), the common
 * run "over the veth, then under a 200 Mbit/s token bucket", and the check that no namespace of this JVM
 * survives the class.
 */
abstract class CrossHostTestBase {
    /** The link limit of the rate-limited variants ({@code tc tbf}). */
    static final String RATE = "200mbit";
    /** Timed transfers per variant (plus one untimed warm-up per process pair). */
    static final int TRANSFERS = 3;

    /**
     * Whether the common run ends with a second pair on one namespace's loopback (ours without the link; for the
     * README's numbers: {@code -Dcrosshost.loopbackBaseline=true}; off in the suite to keep it short).
     */
    static final boolean LOOPBACK_BASELINE = Boolean.getBoolean("crosshost.loopbackBaseline");

    static Path secret;

    @BeforeAll
    static void namespacesAndSecret() throws IOException {
        String cause = NetnsPair.unavailabilityCause();
        assumeTrue(cause == null, () -> "cross-host tests skipped: " + cause);
        secret = Files.createTempFile("kvtransfer-crosshost-secret", ".bin");
        secret.toFile().deleteOnExit();
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        Files.write(secret, b);
    }

    @AfterAll
    static void noNamespaceOfOursLeft() throws IOException {
        if (secret != null) {
            Files.deleteIfExists(secret);
        }
        if (NetnsPair.unavailabilityCause() == null) {
            String mine = NetnsPair.PREFIX + ProcessHandle.current().pid() + "-";
            assertThat(NetnsPair.existing().stream().filter(n -> n.startsWith(mine)).collect(Collectors.toList()))
                    .as("namespaces of this JVM left after the class").isEmpty();
        }
    }

    /** The Aeron driver counters that show loss and its repair, in this order in the reports. */
    static final List<String> LOSS_COUNTERS = List.of("Bytes sent", "Bytes received", "NAKs sent", "NAKs received",
            "Retransmits sent", "Retransmitted bytes", "Loss gap fills", "LOSS observations", "LOSS bytes",
            "Errors", "loss generator frames seen", "loss generator frames dropped");

    /**
     * One process pair in fresh namespaces: a warm-up, {@link #TRANSFERS} 8 MiB transfers over the bare veth, then
     * the same under {@link #RATE}, each phase followed by the raw TCP baseline of the same link and size
     * ({@link CrossHostPair#rawTcp}); then, with {@link #LOOPBACK_BASELINE}, a second pair on the loopback of one
     * namespace (ours without the link). Every transfer verified, the bytes seen on the veth (and, limited, in the
     * token bucket), the processes' counters and the kernel's drops of each phase reported.
     *
     * @param backend transport
     * @param label   variant prefix for the report, e.g. {@code "ucx-tcp"}
     * @param props   both sides' properties
     * @return the generation process's counters at the end
     * @throws IOException if a process cannot start
     */
    static Map<String, Long> overVethThenRateLimited(String backend, String label, Map<String, String> props)
            throws IOException {
        try (NetnsPair net = NetnsPair.create();
             CrossHostPair pair = CrossHostPair.start(net, backend, label, props, Map.of(), Map.of(), List.of(),
                     secret)) {
            pair.transfer(16); // warm-up: connections, one block
            long rx0 = net.deviceBytes(net.b())[0];
            Map<String, Long> gen0 = pair.generationCounters();
            Map<String, Long> ctx0 = pair.contextCounters();
            Map<String, Long> kernel0 = net.kernelDrops(net.b());
            List<CrossHostPair.Transfer> bare = pair.measure(label + " veth", TRANSFERS, CrossHostPair.PROMPT_8MIB);
            long kv = bare.stream().mapToLong(CrossHostPair.Transfer::bytes).sum();
            long rx1 = net.deviceBytes(net.b())[0];
            // The KV bytes crossed the veth into the generation namespace (no shortcut over a loopback).
            assertThat(rx1 - rx0).as("bytes received on the generation namespace's veth %s", net.b().device())
                    .isGreaterThanOrEqualTo(kv);
            Map<String, Long> gen1 = pair.generationCounters();
            Map<String, Long> ctx1 = pair.contextCounters();
            reportCounters(label + " veth", ctx0, ctx1, gen0, gen1);
            Map<String, Long> kernel1 = net.kernelDrops(net.b());
            CrossHostPair.report("CROSSHOST " + label + " veth kernel drops gen side " + delta(kernel0, kernel1));
            pair.rawTcp("raw-tcp veth (" + label + " run)", TRANSFERS, bare.get(0).bytes());

            net.rateLimit(RATE);
            long sent0 = sentBytes(net.qdisc(net.a()));
            List<CrossHostPair.Transfer> limited = pair.measure(label + " veth " + RATE, TRANSFERS,
                    CrossHostPair.PROMPT_8MIB);
            long kvLimited = limited.stream().mapToLong(CrossHostPair.Transfer::bytes).sum();
            String qdisc = net.qdisc(net.a());
            CrossHostPair.report("CROSSHOST " + label + " veth " + RATE + " qdisc on " + net.a().device() + ": "
                    + qdisc);
            // The KV bytes went through the context side's token bucket (tc counts what it sent).
            assertThat(qdisc).contains("tbf");
            assertThat(sentBytes(qdisc) - sent0).as("bytes through the token bucket: %s", qdisc)
                    .isGreaterThanOrEqualTo(kvLimited);
            Map<String, Long> gen2 = pair.generationCounters();
            Map<String, Long> ctx2 = pair.contextCounters();
            reportCounters(label + " veth " + RATE, ctx1, ctx2, gen1, gen2);
            CrossHostPair.report("CROSSHOST " + label + " veth " + RATE + " kernel drops gen side "
                    + delta(kernel1, net.kernelDrops(net.b())));
            pair.rawTcp("raw-tcp veth " + RATE + " (" + label + " run)", TRANSFERS, limited.get(0).bytes());
            pair.finish();
            loopbackBaseline(net, backend, label, props);
            return gen2;
        }
    }

    /**
     * With {@link #LOOPBACK_BASELINE}: ours without the link, both processes on the loopback of namespace a,
     * {@link #TRANSFERS} verified 8 MiB transfers reported as {@code <label> lo (one namespace)}; else nothing.
     *
     * @param net     our namespaces
     * @param backend transport
     * @param label   variant prefix
     * @param props   both sides' properties
     * @throws IOException if a process cannot start
     */
    static void loopbackBaseline(NetnsPair net, String backend, String label, Map<String, String> props)
            throws IOException {
        if (!LOOPBACK_BASELINE) {
            return;
        }
        NetnsPair.Side lo = net.a().loopback();
        try (CrossHostPair local = CrossHostPair.start(net, lo, lo, backend, label + "-lo", props, Map.of(),
                Map.of(), List.of(), secret)) {
            local.transfer(16);
            local.measure(label + " lo (one namespace)", TRANSFERS, CrossHostPair.PROMPT_8MIB);
            local.finish();
        }
    }

    /** Reports the loss counters' growth over one phase on both sides (nothing for a backend without counters). */
    static void reportCounters(String variant, Map<String, Long> ctxBefore, Map<String, Long> ctxAfter,
                               Map<String, Long> genBefore, Map<String, Long> genAfter) {
        if (ctxAfter.isEmpty() && genAfter.isEmpty()) {
            return;
        }
        CrossHostPair.report("CROSSHOST " + variant + " counters ctx " + delta(ctxBefore, ctxAfter));
        CrossHostPair.report("CROSSHOST " + variant + " counters gen " + delta(genBefore, genAfter));
    }

    /**
     * @return the growth from one snapshot to a later one: of the {@link #LOSS_COUNTERS} when the snapshots are
     *         a driver's counters, else of every key of {@code after}
     */
    static Map<String, Long> delta(Map<String, Long> before, Map<String, Long> after) {
        Map<String, Long> out = new LinkedHashMap<>();
        for (String k : after.containsKey("NAKs sent") ? LOSS_COUNTERS : after.keySet()) {
            out.put(k, after.getOrDefault(k, 0L) - before.getOrDefault(k, 0L));
        }
        return out;
    }

    /** @return the "Sent N bytes" of a {@code tc -s qdisc show} line */
    static long sentBytes(String qdisc) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("Sent (\\d+) bytes").matcher(qdisc);
        assertThat(m.find()).as("'Sent N bytes' in %s", qdisc).isTrue();
        return Long.parseLong(m.group(1));
    }
}
