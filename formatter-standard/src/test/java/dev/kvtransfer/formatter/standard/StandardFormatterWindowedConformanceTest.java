package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.WindowedGrid;

/**
 * The standard formatter over sliding-window caches ({@link WindowedGrid.windowed()}): per layer only the blocks
 * inside its window move, so every generation rank receives exactly the bytes of those blocks (rules 2, 11 and 14
 * count them), every element inside a window holds the request's pattern and every element of a windowed layer before
 * its window still holds the poison written before the transfer; with prefix reuse of none, some and all blocks.
 */
class StandardFormatterWindowedConformanceTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new StandardFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return WindowedGrid.windowed().withReuse(0, 1, 5, LayoutPair.ALL_BLOCKS);
    }
}
