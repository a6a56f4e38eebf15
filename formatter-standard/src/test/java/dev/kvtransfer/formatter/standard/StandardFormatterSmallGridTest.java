package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;

/**
 * The standard formatter over {@link LayoutGrid#standardSmall()}, the preset slow (network) backends run: proves
 * every pair of that preset is one the standard formatter moves (or refuses as declared).
 */
class StandardFormatterSmallGridTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new StandardFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }
}
