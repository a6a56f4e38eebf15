package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;

import java.util.List;

/**
 * The standard formatter against the whole standard grid plus context CP (which it supports beyond TensorRT-LLM), with
 * the pool layouts of both sides in rotation, prefix reuse of none, some and all blocks, and every pool-layout pair
 * on six shapes ({@link LayoutGrid#standardConformance()}). The push and layer-wise rules run over every 7th pair of
 * the rotated grid (every pool-layout combination, reuse none / all / some) plus every pool-layout pair on four of
 * the six shapes (TP2 to TP1, TP1 PP2 to TP2, generation CP2, duplicated heads TP4 to TP2), with their reuse.
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

    @Override
    protected LayoutGrid pushGrid() {
        List<LayoutPair> shapes = LayoutGrid.standardPoolShapes().supported();
        return LayoutGrid.standardFull().plus(LayoutGrid.contextCp()).withPoolLayouts(LayoutGrid.standardPoolLayouts())
                .withReuse(0, LayoutPair.ALL_BLOCKS, 1, 3).sample(7)
                .plus(LayoutGrid.of(List.of(shapes.get(1), shapes.get(2), shapes.get(3), shapes.get(5)))
                        .everyPoolLayoutPair(LayoutGrid.standardPoolLayouts())
                        .withReuse(1, 0, 2, LayoutPair.ALL_BLOCKS));
    }
}
