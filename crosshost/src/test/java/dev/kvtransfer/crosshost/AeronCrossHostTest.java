package dev.kvtransfer.crosshost;

import dev.kvtransfer.aeron.AeronTransportProvider;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Aeron over UDP between two network namespaces: the context process (TP2) in one, the generation process (PP2)
 * in the other, each with its own embedded media driver bound to its veth address. Over the bare veth, under a
 * 200 Mbit/s token bucket, and under the same limit with 1 % and 5 % receive loss from Aeron's own loss generator
 * ({@code DebugReceiveChannelEndpoint} + {@code RandomLossGenerator}, enabled in both drivers through
 * {@code aeron.ReceiveChannelEndpoint.supplier} and {@code aeron.debug.receive.data.loss.rate}/{@code .seed}):
 * every transfer verified element by element, the loss visible in the drivers' counters (NAKs sent by the
 * receiving driver, retransmits by the sending one, the loss report), the times reported.
 */
@Timeout(value = 100, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class AeronCrossHostTest extends CrossHostTestBase {
    /** Aeron's debug receive endpoint: drops received data (and setup) frames at the configured rate. */
    static final String DEBUG_RECEIVE_SUPPLIER = "io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier";

    @BeforeAll
    static void aeronAvailable() {
        AeronTransportProvider p = new AeronTransportProvider();
        assumeTrue(p.isAvailable(), p::unavailabilityCause);
    }

    @Test
    void required_01_udpBetweenNamespacesMovesVerifiedKvBareAndUnder200mbit() throws IOException {
        Map<String, Long> gen = overVethThenRateLimited("aeron", "aeron-udp", Map.of(), side -> Map.of());
        assertThat(gen).as("generation driver's counters").containsKey("Bytes received");
        assertThat(gen.get("Bytes received")).as("bytes the generation driver received").isPositive();
    }

    @Test
    void required_02_udpUnder200mbitWithOnePercentReceiveLossRecoversEveryTransfer() throws IOException {
        lossy(0.01, 0x5eed01L);
    }

    @Test
    void required_03_udpUnder200mbitWithFivePercentReceiveLossRecoversEveryTransfer() throws IOException {
        lossy(0.05, 0x5eed05L);
    }

    private static void lossy(double rate, long seed) throws IOException {
        String label = String.format(Locale.ROOT, "aeron-udp %s loss %.0f%%", RATE, rate * 100);
        List<String> loss = List.of("aeron.ReceiveChannelEndpoint.supplier=" + DEBUG_RECEIVE_SUPPLIER,
                "aeron.debug.receive.data.loss.rate=" + rate, "aeron.debug.receive.data.loss.seed=" + seed);
        try (NetnsPair net = NetnsPair.create()) {
            net.rateLimit(RATE);
            try (CrossHostPair pair = CrossHostPair.start(net, "aeron", "aeron-loss-" + (int) (rate * 100),
                    Map.of(), Map.of(), Map.of(), loss, secret)) {
                pair.transfer(16); // warm-up
                Map<String, Long> gen0 = pair.generationCounters();
                Map<String, Long> ctx0 = pair.contextCounters();
                pair.measure(label, TRANSFERS, CrossHostPair.PROMPT_8MIB);
                Map<String, Long> gen = delta(gen0, pair.generationCounters());
                Map<String, Long> ctx = delta(ctx0, pair.contextCounters());
                CrossHostPair.report("CROSSHOST " + label + " counters ctx " + ctx);
                CrossHostPair.report("CROSSHOST " + label + " counters gen " + gen);
                CrossHostPair.report("CROSSHOST " + label + " qdisc on " + net.a().device() + ": "
                        + net.qdisc(net.a()));
                // The generation driver lost data frames and asked for them again; the context driver resent them.
                assertThat(gen.getOrDefault("NAKs sent", 0L)).as("generation driver: NAKs sent; %s", gen)
                        .isPositive();
                assertThat(gen.getOrDefault("LOSS observations", 0L)).as("generation driver: loss report; %s", gen)
                        .isPositive();
                assertThat(ctx.getOrDefault("NAKs received", 0L)).as("context driver: NAKs received; %s", ctx)
                        .isPositive();
                assertThat(ctx.getOrDefault("Retransmits sent", 0L)).as("context driver: retransmits; %s", ctx)
                        .isPositive();
                pair.finish();
            }
        }
    }
}
