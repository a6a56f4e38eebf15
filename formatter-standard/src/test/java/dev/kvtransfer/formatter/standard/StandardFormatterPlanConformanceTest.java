package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import org.junit.jupiter.api.Nested;

/**
 * The conformance suite with the two other message plans forced, over every pool-layout pair on six shapes and a
 * sample of the rotated grid: the grid's small shapes otherwise stay below the default both-direct threshold. The
 * push rule runs with the push plans forced the same way: every part written straight from the pool
 * ({@code minDirectEntryBytes} 0), or staged wherever that needs fewer entries (and in chunks of at most 200 bytes,
 * so the staging buffer is refilled several times per part), over every pool-layout pair on six shapes.
 */
class StandardFormatterPlanConformanceTest {
    static LayoutGrid grid() {
        return LayoutGrid.standardPoolShapes().everyPoolLayoutPair(LayoutGrid.standardPoolLayouts())
                .withReuse(0, 1, 2, -1)
                .plus(LayoutGrid.standardFull().withPoolLayouts(LayoutGrid.standardPoolLayouts()).sample(3)
                        .withReuse(2, 0, -1, 1));
    }

    /** Both sides straight from / into their pools wherever both can (threshold 0). */
    @Nested
    class BothDirectWhereverPossible extends FormatterConformanceTest {
        @Override
        protected FormatterProvider provider() {
            return new PolicyFormatterProvider(0, true, 0,
                    dev.kvtransfer.formatter.support.WritePlan.DEFAULT_STAGING_CHUNK);
        }

        @Override
        protected LayoutGrid grid() {
            return StandardFormatterPlanConformanceTest.grid();
        }

        @Override
        protected LayoutGrid pushGrid() {
            return LayoutGrid.standardPoolShapes().everyPoolLayoutPair(LayoutGrid.standardPoolLayouts())
                    .withReuse(0, 1, 2, -1);
        }

        @Override
        protected LayoutGrid layerGrid() {
            return grid().sample(9);
        }
    }

    /** Never both direct: one side stages whenever the plan allows one direct side. */
    @Nested
    class OneSideDirect extends FormatterConformanceTest {
        @Override
        protected FormatterProvider provider() {
            return new PolicyFormatterProvider(Long.MAX_VALUE, true, Long.MAX_VALUE, 200);
        }

        @Override
        protected LayoutGrid grid() {
            return StandardFormatterPlanConformanceTest.grid();
        }

        @Override
        protected LayoutGrid pushGrid() {
            return LayoutGrid.standardPoolShapes().everyPoolLayoutPair(LayoutGrid.standardPoolLayouts())
                    .withReuse(0, 1, 2, -1);
        }

        @Override
        protected LayoutGrid layerGrid() {
            return grid().sample(9);
        }
    }
}
