package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.harness.HarnessOptions;

/**
 * The conformance suite with an indexer-K pool (12 bytes per token) on every rank, over the four pool shapes with
 * every main-pool layout pair and prefix reuse: the second pass moves the indexer blocks after the reused prefix
 * through core's session, next to main pools of any layout.
 */
class MlaFormatterIndexerConformanceTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new MlaFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return MlaFormatterConformanceTest.poolShapes().everyPoolLayoutPair(LayoutGrid.mlaPoolLayouts(2))
                .withReuse(2, LayoutPair.ALL_BLOCKS, 0, 1);
    }

    @Override
    protected HarnessOptions harnessOptions() {
        return HarnessOptions.defaults().withIndexerDim(12);
    }
}
