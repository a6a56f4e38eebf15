package dev.kvtransfer.crosshost;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
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

    /**
     * One process pair in fresh namespaces: a warm-up, {@link #TRANSFERS} 8 MiB transfers over the bare veth, then
     * the same under {@link #RATE}; every transfer verified, the bytes seen on the veth (and, limited, in the
     * token bucket), the processes' counters reported.
     *
     * @param backend  transport
     * @param label    variant prefix for the report, e.g. {@code "aeron-udp"}
     * @param props    both sides' properties
     * @param perSide  properties of one side only (e.g. its device)
     * @return the generation process's counters at the end
     * @throws IOException if a process cannot start
     */
    static Map<String, Long> overVethThenRateLimited(String backend, String label, Map<String, String> props,
                                                    Function<NetnsPair.Side, Map<String, String>> perSide)
            throws IOException {
        try (NetnsPair net = NetnsPair.create();
             CrossHostPair pair = CrossHostPair.start(net, backend, label, props, perSide.apply(net.a()),
                     perSide.apply(net.b()), List.of(), secret)) {
            long rx0 = net.deviceBytes(net.b())[0];
            pair.transfer(16); // warm-up: connections, one block
            List<CrossHostPair.Transfer> bare = pair.measure(label + " veth", TRANSFERS, CrossHostPair.PROMPT_8MIB);
            long kv = bare.stream().mapToLong(CrossHostPair.Transfer::bytes).sum();
            long rx1 = net.deviceBytes(net.b())[0];
            assertThat(rx1 - rx0).as("bytes received on the generation namespace's veth %s", net.b().device())
                    .isGreaterThanOrEqualTo(kv);

            net.rateLimit(RATE);
            List<CrossHostPair.Transfer> limited = pair.measure(label + " veth " + RATE, TRANSFERS,
                    CrossHostPair.PROMPT_8MIB);
            long kvLimited = limited.stream().mapToLong(CrossHostPair.Transfer::bytes).sum();
            String qdisc = net.qdisc(net.a());
            CrossHostPair.report("CROSSHOST " + label + " qdisc on " + net.a().device() + ": " + qdisc);
            // The KV bytes went through the context side's token bucket (tc counts what it sent).
            assertThat(qdisc).contains("tbf");
            assertThat(sentBytes(qdisc)).as("bytes through the token bucket: %s", qdisc)
                    .isGreaterThanOrEqualTo(kvLimited);
            Map<String, Long> genCounters = pair.generationCounters();
            Map<String, Long> ctxCounters = pair.contextCounters();
            CrossHostPair.report("CROSSHOST " + label + " counters ctx " + ctxCounters);
            CrossHostPair.report("CROSSHOST " + label + " counters gen " + genCounters);
            pair.finish();
            return genCounters;
        }
    }

    /** @return the "Sent N bytes" of a {@code tc -s qdisc show} line */
    static long sentBytes(String qdisc) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("Sent (\\d+) bytes").matcher(qdisc);
        assertThat(m.find()).as("'Sent N bytes' in %s", qdisc).isTrue();
        return Long.parseLong(m.group(1));
    }
}
