package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/** The control path's reusable pieces, no garbage per request: data tags without boxing, reused control buffers. */
class ControlPathTest {
    @Test
    void dataTagsStayUniqueWhileHeldAndAreFreedInAnyOrder() {
        DataTags tags = new DataTags(Integer.MAX_VALUE - 100L); // wraps around past Integer.MAX_VALUE
        Random random = new Random(42);
        List<Integer> held = new ArrayList<>();
        Set<Integer> heldSet = new HashSet<>();
        for (int round = 0; round < 20_000; round++) {
            if (held.isEmpty() || random.nextInt(3) != 0) {
                int t = tags.acquire();
                assertThat(t).isGreaterThanOrEqualTo(Tags.FIRST_DATA_TAG);
                assertThat(heldSet.add(t)).as("tag %d handed out twice", t).isTrue();
                held.add(t);
            } else {
                int t = held.remove(random.nextInt(held.size()));
                heldSet.remove(t);
                tags.release(t);
            }
            assertThat(tags.inUse()).isEqualTo(held.size());
        }
        Collections.shuffle(held, random);
        for (int t : held) {
            tags.release(t);
        }
        assertThat(tags.inUse()).isZero();
        tags.release(12345); // unknown: nothing happens
        assertThat(tags.inUse()).isZero();
    }

    @Test
    void waitsNeverGiveMoreThanIsLeftAndReuseTheirDurationWithinAMillisecond() {
        long ms = 1_000_000L;
        java.time.Duration a = Waits.left(120_000 * ms + 700_000);
        assertThat(a).isEqualTo(java.time.Duration.ofMillis(120_000));
        java.time.Duration b = Waits.left(120_000 * ms + 10);
        assertThat(b).isSameAs(a); // the same millisecond: no new object
        java.time.Duration c = Waits.left(119_999 * ms + 999_999);
        assertThat(c).isEqualTo(java.time.Duration.ofMillis(119_999)).isNotSameAs(a);
        Random random = new Random(7);
        for (int i = 0; i < 10_000; i++) {
            long left = 1 + (random.nextLong() & Long.MAX_VALUE) % (600_000 * ms);
            java.time.Duration d = Waits.left(left);
            assertThat(d.toNanos()).as("left %d ns", left).isLessThanOrEqualTo(left).isPositive();
            assertThat(left - d.toNanos()).as("left %d ns", left).isLessThan(ms);
        }
        // Under a millisecond: exactly what is left; nothing left still waits at least 1 ns (the caller checks first).
        assertThat(Waits.left(999_999)).isEqualTo(java.time.Duration.ofNanos(999_999));
        assertThat(Waits.left(0)).isEqualTo(java.time.Duration.ofNanos(1));
    }

    @Test
    void longPairQueueIsAFifoThatGrowsAndClears() {
        LongPairQueue q = new LongPairQueue();
        java.util.ArrayDeque<long[]> model = new java.util.ArrayDeque<>();
        Random random = new Random(17);
        for (int round = 0; round < 20_000; round++) {
            int op = random.nextInt(10);
            if (op < 5) {
                long a = random.nextInt(50);
                long b = random.nextLong();
                q.add(a, b);
                model.add(new long[] {a, b});
            } else if (op < 8) {
                if (model.isEmpty()) {
                    assertThat(q.isEmpty()).isTrue();
                    continue;
                }
                long[] m = model.poll();
                assertThat(q.firstA()).isEqualTo(m[0]);
                assertThat(q.firstB()).isEqualTo(m[1]);
                q.removeFirst();
            } else if (random.nextInt(50) == 0) {
                q.clear();
                model.clear();
            }
            assertThat(q.size()).isEqualTo(model.size());
        }
        while (!model.isEmpty()) {
            long[] m = model.poll();
            assertThat(q.firstA()).isEqualTo(m[0]);
            assertThat(q.firstB()).isEqualTo(m[1]);
            q.removeFirst();
        }
        assertThat(q.isEmpty()).isTrue();
        org.assertj.core.api.Assertions.assertThatThrownBy(q::firstA)
                .isInstanceOf(java.util.NoSuchElementException.class);
    }

    @Test
    void waitsShareOneDurationPerMillisecondAcrossThreads() throws Exception {
        long ms = 1_000_000L;
        // Another test thread of this JVM may land on the same table slot in between: a few tries.
        boolean shared = false;
        for (int attempt = 0; attempt < 5 && !shared; attempt++) {
            java.time.Duration here = Waits.left(29_990 * ms + 5);
            java.time.Duration[] there = new java.time.Duration[1];
            Thread t = new Thread(() -> there[0] = Waits.left(29_990 * ms + 999_000));
            t.start();
            t.join(10_000);
            assertThat(there[0]).isEqualTo(java.time.Duration.ofMillis(29_990));
            shared = there[0] == here;
        }
        assertThat(shared).as("one Duration object per millisecond, whatever the thread").isTrue();
    }

    @Test
    void controlBuffersAreReusedOnlyAfterACompleteExchangeAndAllFreedOnClose() {
        try (HostBufferManager memory = new HostBufferManager()) {
            ControlBuffers control = new ControlBuffers(memory);
            ControlBuffers.Lease a = control.acquire(100);
            a.bytes().putLong(0, 7);
            a.reusable();
            a.close();
            a.close(); // idempotent
            assertThat(control.freeCount()).isEqualTo(1);
            ControlBuffers.Lease b = control.acquire(ControlBuffers.SLOT_BYTES);
            assertThat(b.buffer()).isSameAs(a.buffer());
            assertThat(b.buffer().size()).isGreaterThanOrEqualTo(ControlBuffers.SLOT_BYTES);
            // Closed without reusable(): a failed or timed-out exchange frees the buffer instead.
            b.close();
            assertThat(control.freeCount()).isZero();
            ControlBuffers.Lease big = control.acquire(ControlBuffers.SLOT_BYTES + 1L);
            assertThat(big.buffer().size()).isEqualTo(ControlBuffers.SLOT_BYTES + 1L);
            big.reusable();
            big.close();
            assertThat(control.freeCount()).isZero();
            ControlBuffers.Lease c = control.acquire(8);
            ControlBuffers.Lease d = control.acquire(8);
            c.reusable();
            c.close();
            control.close();
            d.reusable();
            d.close(); // after close: freed, not pooled
            assertThat(control.freeCount()).isZero();
            assertThat(memory.outstandingBuffers()).isZero();
            // Unpooled: every lease is its own buffer.
            ControlBuffers once = ControlBuffers.unpooled(memory);
            ControlBuffers.Lease e = once.acquire(16);
            e.reusable();
            e.close();
            assertThat(once.freeCount()).isZero();
            assertThat(memory.outstandingBuffers()).isZero();
        }
    }
}
