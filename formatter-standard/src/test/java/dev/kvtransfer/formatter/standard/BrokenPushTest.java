package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid.Side;
import dev.kvtransfer.testkit.LayoutGrid;
import org.junit.jupiter.api.Test;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Events;

import java.util.concurrent.atomic.AtomicBoolean;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

/**
 * The push rule catches a formatter that writes a byte twice, writes outside its grants (the reused prefix) or skips
 * bytes: the standard formatter, with its session tampered with one way each, fails
 * {@code required_spec5_15_pushWritesEveryElementExactlyOnce} of the testkit's conformance suite (run through the JUnit
 * engine test kit), naming what went wrong; untampered it passes.
 */
class BrokenPushTest {
    /** How the tampering session breaks the formatter's writes (once per session). */
    enum Breakage {
        /** Writes nothing wrong. */
        NONE,
        /** After a batch, writes its first entry again. */
        WRITE_TWICE,
        /** Drops the last entry of a batch. */
        SKIP_ONE,
        /** Adds an entry into the peer's first (reused) block. */
        OUTSIDE_GRANTS
    }

    /** The conformance suite over a few small pairs with reuse, with a formatter whose writes break one way. */
    abstract static class Broken extends FormatterConformanceTest {
        abstract Breakage breakage();

        @Override
        protected FormatterProvider provider() {
            Breakage b = breakage();
            return ForwardingFormatter.provider("standard-broken-" + b,
                    (cache, buffers) -> new Tampering(new StandardCacheFormatter(cache, buffers), b));
        }

        @Override
        protected LayoutGrid grid() {
            LayoutGrid.Builder b = LayoutGrid.builder();
            b.pair(Side.of(1, 1), Side.of(1, 1));
            b.pair(Side.of(2, 1), Side.of(1, 1));
            b.poolLayouts(PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND);
            b.pair(Side.of(1, 2), Side.of(2, 1));
            return b.build().withReuse(1, 0, 2);
        }

        @Override
        protected LayoutGrid pushGrid() {
            return grid();
        }
    }

    static class Untouched extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.NONE;
        }
    }

    static class WritesTwice extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.WRITE_TWICE;
        }
    }

    static class SkipsOne extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.SKIP_ONE;
        }
    }

    static class WritesOutsideItsGrants extends Broken {
        @Override
        Breakage breakage() {
            return Breakage.OUTSIDE_GRANTS;
        }
    }

    private static Throwable runRule15(Class<?> suite) {
        Events events = EngineTestKit.engine("junit-jupiter")
                .selectors(selectMethod(suite, "required_spec5_15_pushWritesEveryElementExactlyOnce")).execute()
                .testEvents();
        assertThat(events.finished().count()).as("rule 15 ran").isEqualTo(1);
        if (events.failed().count() == 0) {
            return null;
        }
        return events.failed().stream().findFirst().orElseThrow().getPayload(TestExecutionResult.class)
                .orElseThrow().getThrowable().orElseThrow();
    }

    @Test
    void anUntamperedFormatterPassesTheRule() {
        assertThat(runRule15(Untouched.class)).isNull();
    }

    @Test
    void writingAByteTwiceFailsTheRule() {
        Throwable t = runRule15(WritesTwice.class);
        assertThat(t).isNotNull();
        assertThat(t.getMessage()).contains("a byte written twice", "partial or doubled push");
    }

    @Test
    void skippingBytesFailsTheRule() {
        Throwable t = runRule15(SkipsOne.class);
        assertThat(t).isNotNull();
        assertThat(t.getMessage()).contains("partial or doubled push", "elements differ");
    }

    @Test
    void writingOutsideTheGrantsFailsTheRule() {
        Throwable t = runRule15(WritesOutsideItsGrants.class);
        assertThat(t).isNotNull();
        assertThat(t.getMessage()).contains("granted no write");
    }

    /** The standard formatter, pushing through a session that breaks its writes. */
    private static final class Tampering extends ForwardingFormatter {
        private final Breakage breakage;

        Tampering(CacheFormatter inner, Breakage breakage) {
            super(inner);
            this.breakage = breakage;
        }

        @Override
        public void push(TransferSession session, int firstLayer, int layers) {
            inner.push(new TamperedSession(session, breakage), firstLayer, layers);
        }

    }

    /** Delegates everything; breaks the first write it sees. */
    private static final class TamperedSession extends ForwardingSession {
        private final Breakage breakage;
        private final AtomicBoolean done = new AtomicBoolean();

        TamperedSession(TransferSession s, Breakage breakage) {
            super(s);
            this.breakage = breakage;
        }

        @Override
        public void write(int peerIndex, WriteBatch batch) {
            if (breakage == Breakage.NONE || batch.size() == 0 || !done.compareAndSet(false, true)) {
                s.write(peerIndex, batch);
                return;
            }
            switch (breakage) {
                case WRITE_TWICE -> {
                    s.write(peerIndex, batch);
                    WriteBatch again = new WriteBatch(1);
                    again.add(batch.source(0), batch.sourceOffset(0), batch.target(0), batch.targetOffset(0),
                            batch.length(0));
                    s.write(peerIndex, again);
                }
                case SKIP_ONE -> {
                    WriteBatch less = new WriteBatch(batch.size());
                    for (int i = 0; i + 1 < batch.size(); i++) {
                        less.add(batch.source(i), batch.sourceOffset(i), batch.target(i), batch.targetOffset(i),
                                batch.length(i));
                    }
                    s.write(peerIndex, less);
                }
                case OUTSIDE_GRANTS -> {
                    PeerPool pool = s.peerPool(peerIndex);
                    if (s.reusedBlocks() == 0) {
                        done.set(false); // only a request with a reused prefix has a block to trespass on
                        s.write(peerIndex, batch);
                        return;
                    }
                    PoolGeometry g = pool.geometry();
                    int reusedBlock = pool.blockId(0);
                    pool.add(batch, batch.source(0), batch.sourceOffset(0), g.region(reusedBlock, 0, 0, 0),
                            g.planeOffset(reusedBlock, 0, 0, 0), 1);
                    s.write(peerIndex, batch);
                }
                default -> s.write(peerIndex, batch);
            }
        }

    }
}
