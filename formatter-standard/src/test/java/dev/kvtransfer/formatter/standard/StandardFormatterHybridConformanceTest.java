package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;

/**
 * The standard formatter over hybrid models ({@link LayoutGrid#hybrid()}): each request's KV blocks and recurrent
 * states move in one transfer, every received element (blocks and states) checked with KvPattern, with prefix reuse
 * of none, some and all blocks (the states always move whole). A hybrid cache declares neither push nor layer ranges,
 * so rules 15 and 16 assert the refusal.
 */
class StandardFormatterHybridConformanceTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new StandardFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.hybrid().withReuse(0, 1, LayoutPair.ALL_BLOCKS);
    }
}
