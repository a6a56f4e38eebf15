package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.MemoryAccess;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid.Side;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.harness.HarnessOptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Events;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

/**
 * The pull rules catch a formatter that moves a reused block anyway, skips a block or corrupts a byte: the standard
 * formatter (moving runs directly wherever both pools are contiguous), its session tampered with one way each, fails
 * clause 5.1 ({@code required_spec5_01_everyGridPairMovesBytesExactly}, every element checked with KvPattern) of
 * the testkit's suite, run through the JUnit engine test kit over pairs at the pool-layout edges (block, layer-nhd
 * and layer-hnd pools, re-sharded, with prefix reuse and fragmented block ids); untampered it passes.
 */
class BrokenPullTest {
    /** How the tampering session breaks the formatter. */
    enum Breakage {
        /** Nothing: the control. */
        NONE,
        /** The sender ignores the reused prefix and sends its blocks too. */
        REUSED_SENT_ANYWAY,
        /** Both sides skip the first block after the reused prefix (consistently, so nothing hangs). */
        MISSING_BLOCK_SKIPPED,
        /** The receiver flips one bit in the middle of every message it receives. */
        BIT_FLIP
    }

    /** The conformance suite over a few pairs at the pool-layout edges, with a formatter broken one way. */
    abstract static class Broken extends FormatterConformanceTest {
        abstract Breakage breakage();

        @Override
        protected FormatterProvider provider() {
            Breakage b = breakage();
            // Both sides direct wherever both pools are contiguous (threshold 0): runs decide the messages.
            return ForwardingFormatter.provider("standard-broken-pull-" + b, (cache, buffers) -> new Tampering(
                    new PolicyFormatterProvider(0, true, 0,
                            dev.kvtransfer.formatter.support.WritePlan.DEFAULT_STAGING_CHUNK)
                            .create(cache, buffers), b));
        }

        @Override
        protected LayoutGrid grid() {
            LayoutGrid.Builder b = LayoutGrid.builder();
            b.pair(Side.of(1, 1), Side.of(1, 1));
            b.poolLayouts(PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND);
            b.pair(Side.of(2, 1), Side.of(1, 1));
            b.poolLayouts(PoolLayout.LAYER_HND, PoolLayout.BLOCK);
            b.pair(Side.of(1, 2), Side.of(2, 1));
            return b.build().withReuse(1, 0, 2);
        }

        @Override
        protected HarnessOptions harnessOptions() {
            // A broken plan may leave a receive waiting: fail it in seconds, not the default deadline.
            return HarnessOptions.defaults().withTimeout(Duration.ofSeconds(5));
        }
    }

    static class Untouched extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.NONE;
        }
    }

    static class ReusedSentAnyway extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.REUSED_SENT_ANYWAY;
        }
    }

    static class MissingBlockSkipped extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.MISSING_BLOCK_SKIPPED;
        }
    }

    static class BitFlip extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.BIT_FLIP;
        }
    }

    private static Class<?> suite(Breakage b) {
        return switch (b) {
            case NONE -> Untouched.class;
            case REUSED_SENT_ANYWAY -> ReusedSentAnyway.class;
            case MISSING_BLOCK_SKIPPED -> MissingBlockSkipped.class;
            case BIT_FLIP -> BitFlip.class;
        };
    }

    private static Throwable runRule1(Class<?> suite) {
        Events events = EngineTestKit.engine("junit-jupiter")
                .selectors(selectMethod(suite, "required_spec5_01_everyGridPairMovesBytesExactly")).execute()
                .testEvents();
        assertThat(events.finished().count()).as("rule 5.1 ran").isEqualTo(1);
        if (events.failed().count() == 0) {
            return null;
        }
        return events.failed().stream().findFirst().orElseThrow().getPayload(TestExecutionResult.class)
                .orElseThrow().getThrowable().orElseThrow();
    }

    @ParameterizedTest
    @EnumSource(Breakage.class)
    void everyBreakageFailsClause51AndTheUntouchedFormatterPasses(Breakage b) {
        Throwable t = runRule1(suite(b));
        if (b == Breakage.NONE) {
            assertThat(t).as("the untouched standard formatter passes").isNull();
            return;
        }
        assertThat(t).as("%s must fail clause 5.1", b).isNotNull();
        // The rule names the pair and what differed (a KvPattern mismatch or the failure that ended the run).
        assertThat(t.getMessage()).contains("ctx");
    }

    /** The standard formatter, pulling through a session that breaks it one way. */
    private static final class Tampering extends ForwardingFormatter {
        private final Breakage breakage;

        Tampering(CacheFormatter inner, Breakage breakage) {
            super(inner);
            this.breakage = breakage;
        }

        private TransferSession wrap(TransferSession s) {
            return breakage == Breakage.NONE ? s : new TamperedSession(s, breakage);
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

    /** Delegates everything except the one thing its breakage changes. */
    private static final class TamperedSession extends ForwardingSession {
        private final Breakage breakage;

        TamperedSession(TransferSession s, Breakage breakage) {
            super(s);
            this.breakage = breakage;
        }

        @Override
        public int reusedBlocks() {
            int r = s.reusedBlocks();
            if (breakage == Breakage.REUSED_SENT_ANYWAY && s.isSender()) {
                return 0;
            }
            if (breakage == Breakage.MISSING_BLOCK_SKIPPED && r < s.totalBlocks()) {
                return r + 1;
            }
            return r;
        }

        @Override
        public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
            s.recv(peerIndex, buffer, offset, length);
            if (breakage == Breakage.BIT_FLIP && length > 0 && buffer.kind() != MemoryKind.DEVICE) {
                long a = buffer.address() + offset + length / 2;
                MemoryAccess.putByte(a, (byte) (MemoryAccess.getByte(a) ^ 0x04));
            }
        }

    }
}
