package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.junit.jupiter.api.Test;

import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** The formatters' region views: fetched from the cache view once each, and the pool's memory kind. */
class PoolRegionsTest {
    private static KvCacheView blocks(int n, AtomicInteger fetched) {
        HeapMemory mem = new HeapMemory();
        BlockLayout layout = new BlockLayout(1, 2, 1, 4, 8, 2);
        MemoryBuffer[] b = new MemoryBuffer[n];
        for (int i = 0; i < n; i++) {
            b[i] = mem.allocate(layout.blockBytes(), MemoryKind.HOST);
        }
        return new KvCacheView() {
            @Override
            public BlockLayout layout() {
                return layout;
            }

            @Override
            public MemoryBuffer block(int blockId) {
                fetched.incrementAndGet();
                return b[blockId];
            }

            @Override
            public int blockCount() {
                return n;
            }
        };
    }

    @Test
    void eachRegionIsFetchedOnceAndTheKindIsTheFirstRegions() {
        AtomicInteger fetched = new AtomicInteger();
        KvCacheView view = blocks(3, fetched);
        PoolRegions r = new PoolRegions(view);
        assertThat(r.kind()).isEqualTo(MemoryKind.HOST);
        int afterKind = fetched.get();
        MemoryBuffer first = r.region(2);
        assertThat(r.apply(2)).isSameAs(first);
        assertThat(r.region(2)).isSameAs(first);
        assertThat(fetched.get() - afterKind).isEqualTo(1);
    }

    @Test
    void aPoolWithoutRegionsIsHostMemory() {
        assertThat(new PoolRegions(blocks(0, new AtomicInteger())).kind()).isEqualTo(MemoryKind.HOST);
    }
}
