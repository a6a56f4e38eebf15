package dev.kvtransfer.core.buffer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.TransferBufferPool.Direction;
import dev.kvtransfer.api.format.TransferBufferPool.Slot;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

class DefaultTransferBufferPoolTest {
    private static final Duration LONG = Duration.ofSeconds(30);
    private final HostBufferManager mm = new HostBufferManager();
    private final ExecutorService ex = Executors.newCachedThreadPool();

    @AfterEach
    void tearDown() throws InterruptedException {
        ex.shutdownNow();
        assertThat(ex.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
        mm.close(); // fails if a slot or dynamic buffer leaked
    }

    @Test
    void slotsArePreallocatedAndTheLowestFreeOneIsTaken() {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 1000, 2, 3, true)) {
            assertThat(mm.outstandingBuffers()).isEqualTo(5);
            assertThat(pool.slotBytes()).isEqualTo(1000);
            assertThat(pool.slotCount(Direction.SEND)).isEqualTo(2);
            assertThat(pool.slotCount(Direction.RECV)).isEqualTo(3);
            Slot s0 = pool.acquire(Direction.SEND, LONG);
            Slot s1 = pool.acquire(Direction.SEND, LONG);
            long a0 = s0.carve(new long[] {10})[0].address();
            long a1 = s1.carve(new long[] {10})[0].address();
            assertThat(a0).isNotEqualTo(a1);
            assertThat(pool.freeSlots(Direction.SEND)).isZero();
            assertThat(pool.freeSlots(Direction.RECV)).isEqualTo(3);
            s0.close();
            s0.close(); // idempotent
            Slot again = pool.acquire(Direction.SEND, LONG);
            assertThat(again.carve(new long[] {10})[0].address()).isEqualTo(a0); // lowest free = slot 0
            again.close();
            s1.close();
            assertThat(pool.heldSlots()).isZero();
        }
        assertThat(mm.outstandingBuffers()).isZero();
    }

    @Test
    void carveSlicesWhileTheyFitThenDynamicBuffers() {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 100, 1, 1, true)) {
            try (Slot s = pool.acquire(Direction.RECV, LONG)) {
                MemoryBuffer[] parts = s.carve(new long[] {40, 60, 1, 5});
                assertThat(s.covered()).isEqualTo(2);
                assertThat(parts[1].address()).isEqualTo(parts[0].address() + 40);
                assertThat(parts).extracting(MemoryBuffer::size).containsExactly(40L, 60L, 1L, 5L);
                assertThat(mm.outstandingBuffers()).isEqualTo(2 + 2); // 2 slots + 2 dynamic
                for (MemoryBuffer p : parts) { // every part is writable memory
                    MemoryAccess.fill(p.address(), p.size(), (byte) 7);
                }
                // A part that does not fit ends coverage, even if later ones would fit.
                parts = s.carve(new long[] {101, 1});
                assertThat(s.covered()).isZero();
                assertThat(parts[1].size()).isEqualTo(1);
                parts = s.carve(new long[] {100, 0});
                assertThat(s.covered()).isEqualTo(2);
                assertThat(s.carve(new long[0])).isEmpty();
                assertThatThrownBy(() -> s.carve(new long[] {-1})).isInstanceOf(IllegalArgumentException.class);
            }
            assertThat(mm.outstandingBuffers()).isEqualTo(2); // dynamic buffers freed by the slot's close
        }
    }

    @Test
    void withoutDynamicAPartThatDoesNotFitFails() {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 100, 1, 1, false);
             Slot s = pool.acquire(Direction.SEND, LONG)) {
            assertThat(s.carve(new long[] {50, 50})).hasSize(2);
            assertThat(s.covered()).isEqualTo(2);
            assertThatThrownBy(() -> s.carve(new long[] {50, 51}))
                    .isInstanceOfSatisfying(KvTransferException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.INTERNAL))
                    .hasMessageContaining("part 1 of 2").hasMessageContaining("51 B")
                    .hasMessageContaining("dynamic buffers are off");
        }
    }

    @Test
    void dynamicOnlyModeNeverWaitsAndCoversNothing() {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 0, 1, 1, true)) {
            assertThat(mm.outstandingBuffers()).isZero();
            List<Slot> slots = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                slots.add(pool.acquire(Direction.SEND, Duration.ZERO));
            }
            MemoryBuffer[] parts = slots.get(0).carve(new long[] {10, 20});
            assertThat(slots.get(0).covered()).isZero();
            assertThat(parts).extracting(MemoryBuffer::size).containsExactly(10L, 20L);
            assertThatThrownBy(pool::close).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("dynamic-only");
            slots.forEach(Slot::close);
        }
        assertThatThrownBy(() -> new DefaultTransferBufferPool(mm, 0, 1, 1, false))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("allowDynamic");
        assertThatThrownBy(() -> new DefaultTransferBufferPool(mm, 10, 0, 1, true))
                .isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void acquireTimesOutNamingTheDirectionAndTheWait() {
        // Receives wait only with dynamic buffers off (with them on the receive set grows instead).
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, false)) {
            Slot held = pool.acquire(Direction.RECV, LONG);
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> pool.acquire(Direction.RECV, Duration.ofMillis(200)))
                    .isInstanceOfSatisfying(KvTransferException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT))
                    .hasMessageContaining("RECV").hasMessageContaining("PT0.2S")
                    .hasMessageContaining("held by thread '" + Thread.currentThread().getName() + "'");
            assertThat(System.nanoTime() - t0).isGreaterThanOrEqualTo(TimeUnit.MILLISECONDS.toNanos(195));
            // The other direction is independent.
            pool.acquire(Direction.SEND, Duration.ZERO).close();
            held.close();
        }
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, true)) {
            Slot held = pool.acquire(Direction.SEND, LONG);
            assertThatThrownBy(() -> pool.acquire(Direction.SEND, Duration.ofMillis(50)))
                    .isInstanceOfSatisfying(KvTransferException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT))
                    .hasMessageContaining("SEND");
            held.close();
        }
    }

    @Test
    void aReceiveWithEverySlotHeldGetsANewSlotThatStaysInThePool() {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, true)) {
            Slot first = pool.acquire(Direction.RECV, LONG);
            Slot second = pool.acquire(Direction.RECV, Duration.ZERO); // no wait, no timeout
            assertThat(pool.slotCount(Direction.RECV)).isEqualTo(2);
            assertThat(pool.freeSlots(Direction.RECV)).isZero();
            MemoryBuffer[] a = first.carve(new long[] {64});
            MemoryBuffer[] b = second.carve(new long[] {40, 24});
            assertThat(second.covered()).as("the new slot is a full slot").isEqualTo(2);
            assertThat(b[0].address()).isNotEqualTo(a[0].address());
            assertThat(b[1].address()).isEqualTo(b[0].address() + 40);
            first.close();
            second.close();
            assertThat(pool.freeSlots(Direction.RECV)).isEqualTo(2);
            // Kept: the next two receives reuse both slots, nothing new is allocated.
            long buffers = mm.outstandingBuffers();
            Slot c = pool.acquire(Direction.RECV, Duration.ZERO);
            Slot d = pool.acquire(Direction.RECV, Duration.ZERO);
            assertThat(pool.slotCount(Direction.RECV)).isEqualTo(2);
            assertThat(mm.outstandingBuffers()).isEqualTo(buffers);
            c.close();
            d.close();
        }
        assertThat(mm.outstandingBuffers()).isZero();
    }

    @Test
    void aReturnedSlotWakesAWaiter() throws Exception {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, true)) {
            Slot held = pool.acquire(Direction.SEND, LONG);
            Future<Slot> waiter = ex.submit(() -> pool.acquire(Direction.SEND, LONG));
            await().atMost(LONG).until(() -> waitingThreads() == 1);
            held.close();
            Slot got = waiter.get(30, TimeUnit.SECONDS);
            assertThat(pool.freeSlots(Direction.SEND)).isZero();
            got.close();
            assertThat(pool.freeSlots(Direction.SEND)).isEqualTo(1);
        }
    }

    @Test
    void waitersAreServedInArrivalOrder() throws Exception {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, true)) {
            Slot held = pool.acquire(Direction.SEND, LONG);
            List<Integer> order = Collections.synchronizedList(new ArrayList<>());
            List<Future<?>> fs = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                int id = i;
                int queuedBefore = i;
                await().atMost(LONG).until(() -> waitingThreads() == queuedBefore);
                fs.add(ex.submit(() -> {
                    Slot s = pool.acquire(Direction.SEND, LONG);
                    order.add(id);
                    s.close();
                    return null;
                }));
            }
            await().atMost(LONG).until(() -> waitingThreads() == 5);
            held.close();
            for (Future<?> f : fs) {
                f.get(30, TimeUnit.SECONDS);
            }
            assertThat(order).containsExactly(0, 1, 2, 3, 4);
        }
    }

    /** Threads parked inside acquire: observable without a test hook in the pool. */
    private static long waitingThreads() {
        return Thread.getAllStackTraces().entrySet().stream().filter(e -> e.getKey().getState()
                == Thread.State.TIMED_WAITING && java.util.Arrays.stream(e.getValue()).anyMatch(
                        f -> f.getClassName().equals(DefaultTransferBufferPool.class.getName())
                                && f.getMethodName().equals("acquire"))).count();
    }

    @Test
    void anInterruptedWaitIsCancelledAndKeepsTheFlag() throws Exception {
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 1, 1, true)) {
            Slot held = pool.acquire(Direction.SEND, LONG);
            CompletableFuture<Throwable> result = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    pool.acquire(Direction.SEND, LONG).close();
                    result.complete(null);
                } catch (Throwable e) {
                    result.complete(Thread.currentThread().isInterrupted() ? e : new AssertionError("flag lost", e));
                }
            });
            t.start();
            await().atMost(LONG).until(() -> waitingThreads() == 1);
            t.interrupt();
            Throwable e = result.get(30, TimeUnit.SECONDS);
            assertThat(e).isInstanceOfSatisfying(KvTransferException.class,
                    k -> assertThat(k.code()).isEqualTo(ErrorCode.CANCELLED));
            t.join(10_000);
            held.close();
            assertThat(pool.freeSlots(Direction.SEND)).isEqualTo(1); // the cancelled waiter took nothing
        }
    }

    @Test
    void closeFailsWhileSlotsAreHeldAndNamesThem() {
        DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 64, 2, 2, true);
        Slot a = pool.acquire(Direction.SEND, LONG);
        Slot b = pool.acquire(Direction.RECV, LONG);
        b.carve(new long[] {1000});
        assertThatThrownBy(pool::close).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("2 slot(s)").hasMessageContaining("SEND slot 0")
                .hasMessageContaining("RECV slot 0");
        a.close();
        b.close();
        pool.close();
        pool.close();
        assertThat(mm.outstandingBuffers()).isZero();
        assertThatThrownBy(() -> pool.acquire(Direction.SEND, LONG)).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void concurrentTransfersNeverShareASlot() throws Exception {
        int slots = 3;
        try (DefaultTransferBufferPool pool = new DefaultTransferBufferPool(mm, 4096, slots, 1, true)) {
            AtomicInteger inUse = new AtomicInteger();
            AtomicInteger maxInUse = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            CountDownLatch go = new CountDownLatch(1);
            for (int t = 0; t < 8; t++) {
                byte mark = (byte) t;
                fs.add(ex.submit(() -> {
                    go.await();
                    for (int i = 0; i < 300; i++) {
                        try (Slot s = pool.acquire(Direction.SEND, LONG)) {
                            maxInUse.accumulateAndGet(inUse.incrementAndGet(), Math::max);
                            MemoryBuffer[] p = s.carve(new long[] {4096});
                            MemoryAccess.fill(p[0].address(), 4096, mark);
                            for (long k = 0; k < 4096; k += 512) {
                                assertThat(MemoryAccess.getByte(p[0].address() + k)).isEqualTo(mark);
                            }
                            inUse.decrementAndGet();
                        }
                    }
                    return null;
                }));
            }
            go.countDown();
            for (Future<?> f : fs) {
                f.get(60, TimeUnit.SECONDS);
            }
            assertThat(maxInUse.get()).isBetween(1, slots);
            assertThat(pool.heldSlots()).isZero();
        }
    }
}
