package dev.kvtransfer.testkit.mutants;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.RuleBounds;
import dev.kvtransfer.testkit.TransportConformanceTest;
import dev.kvtransfer.testkit.mutants.MutantTransportProvider.Defect;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.discovery.DiscoverySelectors;
import org.junit.platform.engine.discovery.MethodSelector;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Event;
import org.junit.platform.testkit.engine.Events;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Each defect a third-party transport is likely to have, run through the transport suite with the JUnit engine test
 * kit (as {@code LeakCheckExtensionTest} does): the rule of the clause the defect breaks must fail, and its message
 * must say what went wrong. Only the rules that target each defect run, so the whole class stays within a minute.
 * The catch rate (defects whose rule failed / defects) is printed at the end.
 */
class TransportMutantsTest {
    private static final Map<Defect, Boolean> CAUGHT = new ConcurrentHashMap<>();

    /** The transport suite over a mutant, with short waits so a caught defect fails fast. */
    abstract static class MutantSuite extends TransportConformanceTest {
        abstract Defect defect();

        @Override
        protected TransportProvider provider() {
            return new MutantTransportProvider(defect());
        }

        @Override
        protected TransportConfig config(String name) {
            return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(3)).build();
        }

        @Override
        protected Duration peerLossBound() {
            return Duration.ofSeconds(2);
        }

        @Override
        protected Duration threadEndBound() {
            return Duration.ofSeconds(2);
        }
    }

    static class HangRecv extends MutantSuite {
        Defect defect() {
            return Defect.HANG_RECV;
        }
    }

    static class TagTruncated extends MutantSuite {
        Defect defect() {
            return Defect.TAG_TRUNCATED_16;
        }
    }

    static class BitFlipFirst extends MutantSuite {
        Defect defect() {
            return Defect.BIT_FLIP_FIRST;
        }
    }

    static class BitFlipMiddle extends MutantSuite {
        Defect defect() {
            return Defect.BIT_FLIP_MIDDLE;
        }
    }

    static class BitFlipLast extends MutantSuite {
        Defect defect() {
            return Defect.BIT_FLIP_LAST;
        }
    }

    static class PeerLostNeverReported extends MutantSuite {
        Defect defect() {
            return Defect.PEER_LOST_NEVER_REPORTED;
        }
    }

    static class TimeoutAsNetwork extends MutantSuite {
        Defect defect() {
            return Defect.TIMEOUT_REPORTED_AS_NETWORK;
        }
    }

    static class MalformedAsNetwork extends MutantSuite {
        Defect defect() {
            return Defect.MALFORMED_REPORTED_AS_NETWORK;
        }
    }

    static class ClosedAsNetwork extends MutantSuite {
        Defect defect() {
            return Defect.CLOSED_REPORTED_AS_NETWORK;
        }
    }

    static class LateByteAfterCancel extends MutantSuite {
        Defect defect() {
            return Defect.LATE_BYTE_AFTER_CANCEL;
        }
    }

    static class UnhonouredCrossProcess extends MutantSuite {
        Defect defect() {
            return Defect.UNHONOURED_CROSS_PROCESS;
        }
    }

    static class TagTruncated24 extends MutantSuite {
        Defect defect() {
            return Defect.TAG_TRUNCATED_24;
        }
    }

    static class ThreadLeak extends MutantSuite {
        Defect defect() {
            return Defect.THREAD_LEAK;
        }
    }

    static class FdLeak extends MutantSuite {
        Defect defect() {
            return Defect.FD_LEAK;
        }
    }

    static class AvailabilityThrows extends MutantSuite {
        Defect defect() {
            return Defect.AVAILABILITY_THROWS;
        }
    }

    static class WriteSumShort extends MutantSuite {
        Defect defect() {
            return Defect.WRITE_SUM_SHORT;
        }
    }

    static Stream<Arguments> defects() {
        return Stream.of(
                Arguments.of(TagTruncated.class, "required_spec1_19_tagsUseAllThirtyTwoBits", "differs"),
                Arguments.of(BitFlipFirst.class, "required_spec1_01_sendThenRecvDeliversExactBytes", "byte 0"),
                Arguments.of(BitFlipMiddle.class, "required_spec1_02_recvPostedBeforeSendDeliversExactBytes",
                        "differs at word 65536"),
                Arguments.of(BitFlipLast.class, "required_spec1_01_sendThenRecvDeliversExactBytes", "differs at word 131071"),
                Arguments.of(PeerLostNeverReported.class, "optional_spec1_24_peerFailureDetection", "PEER_LOST"),
                Arguments.of(TimeoutAsNetwork.class, "required_spec1_11_recvDeadlineIsTimeout", "TIMEOUT"),
                Arguments.of(MalformedAsNetwork.class, "required_spec1_10_lengthMismatchIsMalformed", "MALFORMED"),
                Arguments.of(ClosedAsNetwork.class, "required_spec1_14_afterCloseNothingRunsAndCallsFail",
                        "TransportClosedException"),
                Arguments.of(LateByteAfterCancel.class, "required_spec1_11_recvDeadlineIsTimeout", "TIMEOUT"),
                Arguments.of(UnhonouredCrossProcess.class, "required_spec1_23_crossProcessWhenDeclared", ""),
                Arguments.of(TagTruncated24.class, "required_spec1_19_tagsUseAllThirtyTwoBits", "differs"),
                Arguments.of(ThreadLeak.class, "required_spec1_16_noThreadOutlivesClose", "mutant-leaked-poller"),
                Arguments.of(FdLeak.class, "required_spec1_20_closeReleasesEveryFileDescriptor",
                        "open file descriptors"),
                Arguments.of(AvailabilityThrows.class, "required_spec1_21_providerIsFoundThroughServiceLoader",
                        "META-INF/services"),
                Arguments.of(WriteSumShort.class,
                        "optional_spec2_06_aSummedWriteSumsEachEntrysSourceOrDeclinesWritingNothing",
                        "CRC32C of entry 0's source"));
    }

    @ParameterizedTest(name = "{0} fails {1}")
    @MethodSource("defects")
    void theClauseTheDefectBreaksFails(Class<? extends MutantSuite> suite, String rule, String says) throws Exception {
        Defect defect = suite.getDeclaredConstructor().newInstance().defect();
        Events tests;
        try {
            tests = run(Map.of(), DiscoverySelectors.selectMethod(suite, rule));
        } finally {
            MutantTransportProvider.release();
        }
        List<Throwable> failures = failures(tests);
        CAUGHT.put(defect, !failures.isEmpty());
        assertThat(failures).as("%s must fail %s", defect, rule).hasSize(1);
        assertThat(describe(failures.get(0))).as("what %s reports", rule).contains(says);
    }

    @Test
    void aRecvThatIgnoresDeadlinesAndInterruptsFailsItsRuleNamingTheCallWithinTheBound() throws Exception {
        long t0 = System.nanoTime();
        Events tests;
        try {
            tests = run(Map.of(RuleBounds.RULE_SECONDS_PROPERTY, "3"),
                    DiscoverySelectors.selectMethod(HangRecv.class, "required_spec1_11_recvDeadlineIsTimeout"));
        } finally {
            MutantTransportProvider.release();
        }
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        List<Throwable> failures = failures(tests);
        CAUGHT.put(Defect.HANG_RECV, !failures.isEmpty());
        assertThat(failures).hasSize(1);
        assertThat(failures.get(0).getMessage()).contains("required_spec1_11_recvDeadlineIsTimeout",
                "did not end within its bound of 3000 ms", "stuck in MutantTransportProvider$Conn.recv",
                "called from TransportLifecycleRules");
        // The bound, the teardown's own bound and the class's leak check: far below the 180 s default.
        assertThat(took).isLessThan(Duration.ofSeconds(60));
    }

    @Test
    void aPluginThatHangsInEveryRuleEndsItsSuiteWithinTheBudget() {
        List<MethodSelector> rules = Stream.of("required_spec1_02_recvPostedBeforeSendDeliversExactBytes",
                        "required_spec1_04_messagesOfOneConnectionAndTagArriveInOrder", "required_spec1_05_tagsDoNotMix",
                        "required_spec1_10_lengthMismatchIsMalformed", "required_spec1_11_recvDeadlineIsTimeout")
                .map(m -> DiscoverySelectors.selectMethod(HangRecv.class, m)).toList();
        long t0 = System.nanoTime();
        Events tests;
        try {
            tests = run(Map.of(RuleBounds.RULE_SECONDS_PROPERTY, "2", RuleBounds.SUITE_SECONDS_PROPERTY, "5"),
                    rules.toArray(new MethodSelector[0]));
        } finally {
            MutantTransportProvider.release();
        }
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        List<Throwable> failures = failures(tests);
        assertThat(failures).hasSize(rules.size());
        assertThat(failures).anySatisfy(t -> assertThat(t.getMessage()).contains("budget of 5 s",
                RuleBounds.SUITE_SECONDS_PROPERTY));
        // 5 rules x 2 s would be 10 s of rules alone (plus teardowns): the budget stops them near 5 s.
        assertThat(took).isLessThan(Duration.ofSeconds(45));
    }

    @org.junit.jupiter.api.BeforeAll
    static void shortLeakWait() {
        // The hung rules leave their threads behind on purpose: the suites' leak check need not wait 20 s for them.
        System.setProperty(dev.kvtransfer.testkit.LeakCheckExtension.BOUND_PROPERTY, "500");
    }

    @AfterAll
    static void catchRate() {
        System.clearProperty(dev.kvtransfer.testkit.LeakCheckExtension.BOUND_PROPERTY);
        MutantTransportProvider.release();
        long caught = CAUGHT.values().stream().filter(b -> b).count();
        System.out.println("transport mutants caught: " + caught + " / " + CAUGHT.size() + " " + CAUGHT);
    }

    private static Events run(Map<String, String> config, org.junit.platform.engine.DiscoverySelector... selectors) {
        EngineTestKit.Builder b = EngineTestKit.engine("junit-jupiter").selectors(selectors);
        config.forEach(b::configurationParameter);
        return b.execute().testEvents();
    }

    private static List<Throwable> failures(Events tests) {
        List<Throwable> out = new ArrayList<>();
        for (Event e : tests.failed().list()) {
            e.getPayload(TestExecutionResult.class).flatMap(TestExecutionResult::getThrowable).ifPresent(out::add);
        }
        return out;
    }

    private static String describe(Throwable t) {
        StringBuilder b = new StringBuilder();
        for (Throwable x = t; x != null; x = x.getCause()) {
            b.append(x).append('\n');
        }
        return b.toString();
    }
}
