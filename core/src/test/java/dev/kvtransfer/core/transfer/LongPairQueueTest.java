package dev.kvtransfer.core.transfer;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.util.ArrayDeque;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link LongPairQueue} against an {@code ArrayDeque} model: add, removeFirst, through growth and wrap. */
class LongPairQueueTest {
    @Property(tries = 300)
    void behavesLikeADequeOfPairs(@ForAll @Size(max = 200) List<@IntRange(min = 0, max = 1) Integer> ops) {
        LongPairQueue q = new LongPairQueue();
        ArrayDeque<long[]> model = new ArrayDeque<>();
        long n = 0;
        for (int op : ops) {
            if (op == 0) {
                q.add(n, -n);
                model.addLast(new long[] {n, -n});
                n++;
            } else if (!model.isEmpty()) {
                long[] want = model.pollFirst();
                assertThat(q.firstA()).isEqualTo(want[0]);
                assertThat(q.firstB()).isEqualTo(want[1]);
                q.removeFirst();
            }
            assertThat(q.size()).isEqualTo(model.size());
        }
        while (!model.isEmpty()) {
            long[] want = model.pollFirst();
            assertThat(q.firstA()).isEqualTo(want[0]);
            assertThat(q.firstB()).isEqualTo(want[1]);
            q.removeFirst();
        }
        assertThat(q.isEmpty()).isTrue();
    }
}
