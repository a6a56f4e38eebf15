package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferSession;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Events;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

/**
 * The formatter mutant the notes recorded as a survivor: a sender that sees the receiver's block ids as one
 * consecutive run (the real ones have holes), so it joins blocks into messages across the receiver's holes. The
 * standard grid's blocks are a few KiB, so where it is caught there it is by the few pairs whose plans coalesce
 * small runs (layer ranges, a context-parallel pair of layer pools); over a grid without those it passes every pull
 * rule but clause 5.17 ({@code required_spec5_17_…}), which moves blocks large enough to travel straight from and
 * into the pools, with ids fragmented differently on the two sides. Run through the JUnit engine test kit over the
 * standard formatter's own suite configuration, 5.17 fails the mutant and passes the untouched formatter.
 */
class BrokenPeerIdsTest {
    static final String RULE = "required_spec5_17_largeBlocksWithBlockIdsFragmentedDifferentlyMoveExactly";

    /** The standard formatter's suite, its sender seeing the peer's block ids as one consecutive run. */
    static class ConsecutivePeerIds extends StandardFormatterConformanceTest {
        @Override
        protected FormatterProvider provider() {
            return ForwardingFormatter.provider("standard-consecutive-peer-ids",
                    (cache, buffers) -> new Tampering(new StandardFormatterProvider().create(cache, buffers)));
        }
    }

    /** The untouched standard formatter's suite: the control. */
    static class Untouched extends StandardFormatterConformanceTest {
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void clause517FailsTheMutantAndPassesTheUntouchedFormatter(boolean mutant) {
        Class<?> suite = mutant ? ConsecutivePeerIds.class : Untouched.class;
        Events events = EngineTestKit.engine("junit-jupiter").selectors(selectMethod(suite, RULE)).execute()
                .testEvents();
        assertThat(events.finished().count()).as("rule 5.17 ran").isEqualTo(1);
        Throwable t = events.failed().stream().findFirst()
                .flatMap(e -> e.getPayload(TestExecutionResult.class)).flatMap(TestExecutionResult::getThrowable)
                .orElse(null);
        if (!mutant) {
            assertThat(t).as("the untouched standard formatter passes clause 5.17").isNull();
            return;
        }
        assertThat(t).as("a sender seeing consecutive peer ids must fail clause 5.17").isNotNull();
        assertThat(t.getMessage()).contains("large-block pairs that failed", "heads x");
    }

    /** The standard formatter, its sender's session reporting the peer's ids as one consecutive run. */
    private static final class Tampering extends ForwardingFormatter {
        Tampering(CacheFormatter inner) {
            super(inner);
        }

        private static TransferSession wrap(TransferSession s) {
            return s.isSender() ? new ConsecutiveIdsSession(s) : s;
        }

        @Override
        public void format(TransferSession session) {
            inner.format(wrap(session));
        }

        @Override
        public void unformat(TransferSession session) {
            inner.unformat(wrap(session));
        }

        @Override
        public void format(TransferSession session, int firstLayer, int layers) {
            inner.format(wrap(session), firstLayer, layers);
        }

        @Override
        public void unformat(TransferSession session, int firstLayer, int layers) {
            inner.unformat(wrap(session), firstLayer, layers);
        }
    }

    private static final class ConsecutiveIdsSession extends ForwardingSession {
        ConsecutiveIdsSession(TransferSession s) {
            super(s);
        }

        @Override
        public int[] peerBlockIds(int peerIndex) {
            int[] real = s.peerBlockIds(peerIndex);
            if (real == null || real.length == 0) {
                return real;
            }
            int[] run = new int[real.length];
            for (int i = 0; i < run.length; i++) {
                run[i] = real[0] + i;
            }
            return run;
        }
    }
}
