package dev.kvtransfer.testkit.mutants;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutGrid.Side;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.RuleBounds;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import dev.kvtransfer.testkit.mutants.MutantTransportProvider.Defect;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.platform.engine.DiscoverySelector;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.discovery.DiscoverySelectors;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Event;
import org.junit.platform.testkit.engine.Events;

import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Defects that break the transceiver's contract rather than a transport rule alone, run through the transceiver and
 * fault suites with the JUnit engine test kit (as {@code TransportMutantsTest} does for the transport suite): each
 * mutant must fail the rule of the clause named for it, saying what went wrong, and the unmutated wrapper must pass
 * every rule used. Only the rules that target each defect run, over one identical-layout pair (this module's
 * whole-block formatter) with a 4 s transfer deadline, so the class stays near a minute. The catch rate is printed
 * at the end.
 */
class TransceiverMutantsTest {
    private static final Map<Defect, String> CAUGHT = new ConcurrentHashMap<>();
    private static final Pattern RULE = Pattern.compile("(required|optional)_spec\\d+_\\d+_[A-Za-z0-9]+");

    /** The defect the suites below run over (the engine test kit runs them on this thread, one at a time). */
    private static volatile Defect defect = Defect.NONE;

    static final String SPEC3_01 = "required_spec3_01_everyGridPairMovesEveryElementExactly";
    static final String SPEC3_02 = "required_spec3_02_twoHundredConcurrentRequestsArriveExactly";
    static final String SPEC3_03 = "required_spec3_03_contextCancelBeforeReadyCancelsBothSides";
    static final String SPEC3_16 = "required_spec3_16_messagesOfAMebibyteAndMoreArriveExactly";
    static final String SPEC4_03 = "required_spec4_03_duplicatedPayloadMessageFailsTheRequestNeverCompletesIt";
    static final String SPEC4_08 = "required_spec4_08_contextEndpointClosedMidMessage"
            + "FailsInBoundAndAFreshContextIsServed";
    static final String SPEC4_11 = "required_spec4_11_droppedRequestInfoTimesOutOnBothSides";

    /** The transceiver suite over the mutant: one TP 2 to TP 2 pair, short deadlines. */
    static class TransceiverSuite extends TransceiverConformanceTest {
        @Override
        protected TransportProvider provider() {
            return new MutantTransportProvider(defect);
        }

        @Override
        protected LayoutGrid grid() {
            return LayoutGrid.builder().pair(Side.of(2, 1), Side.of(2, 1)).build();
        }

        @Override
        protected TransportConfig baseConfig() {
            return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "transceiver-mutants")
                    .build();
        }

        @Override
        protected TransceiverConfig.Builder transceiverConfig() {
            return super.transceiverConfig().kvTransferTimeout(Duration.ofSeconds(4));
        }

        @Override
        protected Duration bound() {
            return Duration.ofSeconds(20);
        }
    }

    /** The fault suite over the mutant (identical layouts: the whole-block formatter does not re-shard). */
    static class FaultSuite extends TransceiverFaultConformanceTest {
        @Override
        protected TransportProvider provider() {
            return new MutantTransportProvider(defect);
        }

        @Override
        protected TransportConfig baseConfig() {
            return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "fault-mutants")
                    .build();
        }

        @Override
        protected boolean resharding() {
            return false;
        }
    }

    /** A capability claimed but not honoured: the loopback sends its payload as messages, this suite says not. */
    static class FalseNoPayloadClaimSuite extends FaultSuite {
        @Override
        protected boolean payloadAsMessages() {
            return false;
        }
    }

    static Stream<Arguments> mutants() {
        return Stream.of(
                Arguments.of(Defect.PEER_LOST_NEVER_REPORTED, FaultSuite.class, SPEC4_08, "must fail PEER_LOST"),
                Arguments.of(Defect.CONTROL_DUPLICATED, TransceiverSuite.class, SPEC3_01, "MALFORMED"),
                Arguments.of(Defect.CONTROL_REORDERED, TransceiverSuite.class, SPEC3_01, "MALFORMED"),
                Arguments.of(Defect.CANCEL_DROPPED, TransceiverSuite.class, SPEC3_03, "CANCELLED"),
                Arguments.of(Defect.SHORT_RECV, TransceiverSuite.class, SPEC3_01, "MALFORMED"),
                Arguments.of(Defect.DEADLINE_OVERSHOT, FaultSuite.class, SPEC4_11, "within"),
                // Colliding tags mix two requests' messages: a length that differs is MALFORMED; with posted ready signals
                // (the default) equal lengths can complete into each other's blocks, which KvPattern reports, and a
                // ready signal taken by the other request fails its MAC, which is bound to the request.
                Arguments.of(Defect.DATA_TAGS_COLLIDE, TransceiverSuite.class, SPEC3_02,
                        "MALFORMED|elements differ|failed authentication"),
                Arguments.of(Defect.BIT_FLIP_FIRST, TransceiverSuite.class, SPEC3_16, "elements differ"),
                Arguments.of(Defect.BIT_FLIP_MIDDLE, TransceiverSuite.class, SPEC3_16, "elements differ"),
                Arguments.of(Defect.BIT_FLIP_LAST, TransceiverSuite.class, SPEC3_16, "elements differ"));
    }

    @BeforeAll
    static void shortLeakWait() {
        // A caught mutant may leave a receive blocked until its instance closes: the leak check need not wait 20 s.
        System.setProperty(LeakCheckExtension.BOUND_PROPERTY, "2000");
    }

    @Test
    void theUnmutatedWrapperPassesEveryRuleTheMutantsFail() {
        Map<String, String> failed = run(Defect.NONE, DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_01),
                DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_02),
                DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_03),
                DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_16),
                DiscoverySelectors.selectMethod(FaultSuite.class, SPEC4_08),
                DiscoverySelectors.selectMethod(FaultSuite.class, SPEC4_11));
        assertThat(failed).as("rules the unmutated wrapper failed").isEmpty();
    }

    @ParameterizedTest(name = "{0} fails {2}")
    @MethodSource("mutants")
    void eachMutantFailsTheRuleOfItsClause(Defect d, Class<?> suite, String rule, String says) {
        Map<String, String> failed = run(d, DiscoverySelectors.selectMethod(suite, rule));
        CAUGHT.put(d, failed.isEmpty() ? "survived"
                : failed.keySet() + ": " + firstLine(failed.values().iterator().next()));
        assertThat(failed).as("%s must fail %s", d, rule).containsKey(rule);
        assertThat(failed.get(rule)).as("what %s reports for %s", rule, d).containsPattern(says);
    }

    @Test
    void aSuiteThatClaimsNoPayloadMessagesOverATransportThatSendsThemFailsRule4_3() {
        Map<String, String> failed = run(Defect.NONE, DiscoverySelectors.selectMethod(FalseNoPayloadClaimSuite.class,
                SPEC4_03));
        assertThat(failed).as("rule 4.3 over a false payloadAsMessages() claim").containsKey(SPEC4_03);
        assertThat(failed.get(SPEC4_03)).contains("declares that pulls send no payload message");
    }

    /**
     * Receives deaf to deadlines and interrupts hang the engine's own threads, not the rule's: each rule still fails
     * at its bound (3 s here), and once one has hung the rest of the class shares the suite's budget (6 s here).
     */
    @Test
    void aTransportThatHangsInEveryReceiveEndsBothSuitesWithinTheirBounds() {
        Map<String, String> failed;
        try {
            failed = run(Defect.HANG_RECV, Map.of(RuleBounds.RULE_SECONDS_PROPERTY, "3",
                            RuleBounds.SUITE_SECONDS_PROPERTY, "6"),
                    DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_03),
                    DiscoverySelectors.selectMethod(TransceiverSuite.class, SPEC3_16),
                    DiscoverySelectors.selectMethod(FaultSuite.class, SPEC4_11));
        } finally {
            MutantTransportProvider.release();
        }
        assertThat(failed).as("rules over a transport whose receives never return").containsKeys(SPEC3_03, SPEC3_16,
                SPEC4_11);
        assertThat(failed.values()).allSatisfy(what -> assertThat(what).containsAnyOf("did not end within its bound",
                "budget of 6 s"));
    }

    @AfterAll
    static void catchRate() {
        System.clearProperty(LeakCheckExtension.BOUND_PROPERTY);
        defect = Defect.NONE;
        long caught = CAUGHT.values().stream().filter(s -> !s.equals("survived")).count();
        System.out.println("transceiver mutants caught: " + caught + " / " + CAUGHT.size());
        new TreeMap<>(CAUGHT).forEach((d, how) -> System.out.println("  " + d + " -> " + how));
    }

    /** Runs the selected rules over a defect; returns each failed rule with what its failures said. */
    private static Map<String, String> run(Defect d, DiscoverySelector... selectors) {
        return run(d, Map.of(), selectors);
    }

    private static Map<String, String> run(Defect d, Map<String, String> config, DiscoverySelector... selectors) {
        defect = d;
        Events tests;
        try {
            EngineTestKit.Builder b = EngineTestKit.engine("junit-jupiter").selectors(selectors);
            config.forEach(b::configurationParameter);
            tests = b.execute().testEvents();
        } finally {
            defect = Defect.NONE;
        }
        assertThat(tests.finished().count()).as("rules that ran over %s", d).isPositive();
        Map<String, String> failed = new TreeMap<>();
        for (Event e : tests.failed().list()) {
            Matcher m = RULE.matcher(e.getTestDescriptor().getUniqueId().toString());
            String rule = m.find() ? m.group() : e.getTestDescriptor().getDisplayName();
            String what = e.getPayload(TestExecutionResult.class).flatMap(TestExecutionResult::getThrowable)
                    .map(TransceiverMutantsTest::describe).orElse("");
            failed.merge(rule, what, (a, b) -> a + "\n" + b);
        }
        return failed;
    }

    private static String firstLine(String s) {
        String line = s.strip().lines().filter(l -> !l.isBlank() && !l.startsWith("java.lang.AssertionError: ["))
                .findFirst().orElse(s.strip());
        return line.length() > 240 ? line.substring(0, 240) + "..." : line;
    }

    private static String describe(Throwable t) {
        StringBuilder b = new StringBuilder();
        for (Throwable x = t; x != null; x = x.getCause()) {
            b.append(x).append('\n');
        }
        return b.toString();
    }
}
