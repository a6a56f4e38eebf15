package dev.kvtransfer.core.transfer;

import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The replay window's primitive table (no node per nonce) against a map model: every nonce is refused while
 * remembered, forgotten only by a purge after its expiry, and in-place deletion never loses or revives one — with
 * many colliding keys, growth and purges at random times.
 */
class ReplayWindowTest {
    private record Key(long high, long low) {
    }

    @Test
    void behavesLikeAMapOfExpiriesUnderRandomAddsAndPurges() {
        Random random = new Random(99);
        for (int trial = 0; trial < 20; trial++) {
            ReplayWindow w = new ReplayWindow();
            Map<Key, Long> model = new HashMap<>();
            long now = 1_000;
            // Few distinct key values: many repeats (replays) and long probe runs.
            int distinct = 50 + random.nextInt(3000);
            for (int op = 0; op < 20_000; op++) {
                int kind = random.nextInt(100);
                if (kind < 85) {
                    long high = random.nextInt(distinct);
                    long low = random.nextInt(3);
                    long expires = now + 1 + random.nextInt(500);
                    boolean fresh = !model.containsKey(new Key(high, low));
                    assertThat(w.addIfAbsent(high, low, expires)).isEqualTo(fresh);
                    if (fresh) {
                        model.put(new Key(high, low), expires);
                    }
                } else if (kind < 95) {
                    now += random.nextInt(100);
                } else {
                    long at = now;
                    w.purgeNow(at);
                    model.values().removeIf(e -> e < at);
                    for (Map.Entry<Key, Long> e : model.entrySet()) {
                        assertThat(w.contains(e.getKey().high(), e.getKey().low())).isTrue();
                    }
                }
                assertThat(w.size()).isEqualTo(model.size());
            }
            for (int h = 0; h < distinct; h++) {
                for (int l = 0; l < 3; l++) {
                    assertThat(w.contains(h, l)).as("key %d/%d", h, l).isEqualTo(model.containsKey(new Key(h, l)));
                }
            }
        }
    }

    @Test
    void purgesAtMostOnceASecondAndRefusesANonPositiveExpiry() {
        ReplayWindow w = new ReplayWindow();
        w.addIfAbsent(1, 2, 5_000);
        w.purge(10_000); // purges: expired
        assertThat(w.contains(1, 2)).isFalse();
        w.addIfAbsent(1, 2, 10_100);
        w.purge(10_500); // within the second since the last purge: nothing happens
        assertThat(w.contains(1, 2)).isTrue();
        assertThat(w.addIfAbsent(1, 2, 20_000)).isFalse();
        w.purge(11_000);
        assertThat(w.contains(1, 2)).isFalse();
        assertThatThrownBy(() -> w.addIfAbsent(3, 4, 0)).isInstanceOf(IllegalArgumentException.class);
    }
}
