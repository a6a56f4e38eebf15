package dev.kvtransfer.core.transfer;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The generation side's overlap check of a push's written ranges ({@link PushReceive#overlap}): starts and ends
 * sorted apart, against a brute-force byte count of the same ranges.
 */
class PushOverlapCheckTest {
    /** Ranges drawn as (start, length) over a small space, so overlaps and exact abutments are both common. */
    @Property(tries = 2000)
    void findsAnOverlapExactlyWhenSomeByteIsCoveredTwice(
            @ForAll @Size(max = 12) List<@IntRange(max = 40) Integer> from,
            @ForAll @Size(max = 12) List<@IntRange(min = 1, max = 9) Integer> length) {
        int m = Math.min(from.size(), length.size());
        long[] starts = new long[m];
        long[] ends = new long[m];
        int[] covered = new int[64];
        boolean twice = false;
        for (int j = 0; j < m; j++) {
            starts[j] = from.get(j);
            ends[j] = from.get(j) + length.get(j);
            for (int b = from.get(j); b < ends[j]; b++) {
                twice |= ++covered[b] > 1;
            }
        }
        int at = PushReceive.overlap(starts, ends, m);
        assertThat(at >= 0).as("overlap reported for %s / %s", from, length).isEqualTo(twice);
        if (at >= 0) {
            // A byte covered twice lies at or after the reported start, before the end it precedes.
            boolean found = false;
            for (long b = starts[at]; b < ends[at - 1]; b++) {
                found |= covered[(int) b] > 1;
            }
            assertThat(found).as("a doubly covered byte in [%d, %d)", starts[at], ends[at - 1]).isTrue();
        }
    }
}
