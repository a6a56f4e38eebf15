package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;

/**
 * The standard formatter against the whole standard grid plus context CP (which it supports beyond issue 3), with
 * the pool layouts of both sides in rotation, prefix reuse of none, some and all blocks, and every pool-layout pair
 * on six shapes ({@link LayoutGrid#standardConformance()}).
 */
class StandardFormatterConformanceTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new StandardFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardConformance();
    }
}
