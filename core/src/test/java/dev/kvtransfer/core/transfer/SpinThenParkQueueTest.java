package dev.kvtransfer.core.transfer;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * The request pools' work queue: every task runs exactly once whatever the interleaving of offers with a spinning,
 * a giving-up and parked workers (no lost wake-up); at most one worker spins, and none while the side is loaded.
 */
class SpinThenParkQueueTest {
    private static final String PREFIX = "stpq-test-";
    private final List<ThreadPoolExecutor> pools = new ArrayList<>();

    @AfterEach
    void stop() throws InterruptedException {
        for (ThreadPoolExecutor p : pools) {
            p.shutdownNow();
            assertThat(p.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
        }
    }

    private ThreadPoolExecutor pool(int n, SpinThenParkQueue q, String name) {
        AtomicInteger count = new AtomicInteger();
        ThreadPoolExecutor p = new ThreadPoolExecutor(n, n, 30, TimeUnit.SECONDS, q, r -> {
            Thread t = new Thread(r, PREFIX + name + "-" + count.getAndIncrement());
            t.setDaemon(true);
            return t;
        });
        p.prestartAllCoreThreads();
        pools.add(p);
        return p;
    }

    private static List<Thread> workers(String name) {
        List<Thread> out = new ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith(PREFIX + name + "-")) {
                out.add(t);
            }
        }
        return out;
    }

    /**
     * Producers offer bursts (one task, then several at once) while the spin window is short, so offers meet a
     * worker that spins, one that just gave up and ones that park: every task must run, once.
     */
    @Test
    void everyTaskRunsOnceAcrossSpinAndParkInterleavings() throws InterruptedException {
        for (long spinNanos : new long[] {0, 2_000, 50_000}) {
            SpinThenParkQueue q = new SpinThenParkQueue(spinNanos, () -> true);
            ThreadPoolExecutor p = pool(4, q, "once-" + spinNanos);
            int producers = 3;
            int perProducer = 3_000;
            ConcurrentHashMap<Integer, AtomicInteger> ran = new ConcurrentHashMap<>();
            CountDownLatch done = new CountDownLatch(producers * perProducer);
            List<Thread> threads = new ArrayList<>();
            for (int k = 0; k < producers; k++) {
                int base = k * perProducer;
                Thread t = new Thread(() -> {
                    for (int i = 0; i < perProducer; i++) {
                        int id = base + i;
                        p.execute(() -> {
                            ran.computeIfAbsent(id, x -> new AtomicInteger()).incrementAndGet();
                            done.countDown();
                        });
                        if (i % 7 == 0) {
                            // A pause as long as a worker's spin or longer: the next offer finds it spinning,
                            // giving up or parked.
                            long until = System.nanoTime() + (i % 3) * spinNanos;
                            while (System.nanoTime() - until < 0) {
                                Thread.onSpinWait();
                            }
                        }
                    }
                });
                threads.add(t);
                t.start();
            }
            for (Thread t : threads) {
                t.join(TimeUnit.SECONDS.toMillis(30));
            }
            assertThat(done.await(30, TimeUnit.SECONDS)).as("spin %d ns: tasks left %d", spinNanos, done.getCount())
                    .isTrue();
            assertThat(ran).hasSize(producers * perProducer);
            assertThat(ran.values()).allSatisfy(c -> assertThat(c.get()).isEqualTo(1));
            assertThat(q.size()).isZero();
            assertThat(q.isEmpty()).isTrue();
        }
    }

    /** Two tasks offered while one worker spins: the spinner takes one, a parked worker is woken for the other. */
    @Test
    void aSecondTaskOfferedWhileOneSpinsWakesAParkedWorker() {
        SpinThenParkQueue q = new SpinThenParkQueue(TimeUnit.SECONDS.toNanos(30), () -> true);
        ThreadPoolExecutor p = pool(2, q, "two");
        awaitStates("two", 1, 1);
        CountDownLatch bothRunning = new CountDownLatch(2);
        AtomicBoolean release = new AtomicBoolean();
        for (int i = 0; i < 2; i++) {
            p.execute(() -> {
                bothRunning.countDown();
                await().atMost(Duration.ofSeconds(20)).untilTrue(release); // holds this worker
            });
        }
        await().atMost(Duration.ofSeconds(20)).until(() -> bothRunning.getCount() == 0);
        release.set(true);
    }

    /** With four idle workers, one spins (RUNNABLE) and three park; while the side is loaded, all four park. */
    @Test
    void oneWorkerSpinsAndNoneUnderLoad() throws InterruptedException {
        AtomicBoolean light = new AtomicBoolean(true);
        SpinThenParkQueue q = new SpinThenParkQueue(TimeUnit.SECONDS.toNanos(30), light::get);
        ThreadPoolExecutor p = pool(4, q, "spin");
        awaitStates("spin", 1, 3);
        CountDownLatch ran = new CountDownLatch(1);
        p.execute(ran::countDown);
        assertThat(ran.await(20, TimeUnit.SECONDS)).isTrue();
        awaitStates("spin", 1, 3); // the worker that ran it (or another) spins again

        SpinThenParkQueue loaded = new SpinThenParkQueue(TimeUnit.SECONDS.toNanos(30), () -> false);
        ThreadPoolExecutor p2 = pool(4, loaded, "loaded");
        awaitStates("loaded", 0, 4);
        CountDownLatch ran2 = new CountDownLatch(1);
        p2.execute(ran2::countDown);
        assertThat(ran2.await(20, TimeUnit.SECONDS)).isTrue();
        awaitStates("loaded", 0, 4);
    }

    private static void awaitStates(String name, int runnable, int waiting) {
        await().atMost(Duration.ofSeconds(20)).untilAsserted(() -> {
            List<Thread> ws = workers(name);
            assertThat(ws).hasSize(runnable + waiting);
            long r = ws.stream().filter(t -> t.getState() == Thread.State.RUNNABLE).count();
            long w = ws.stream().filter(t -> t.getState() == Thread.State.WAITING
                    || t.getState() == Thread.State.TIMED_WAITING).count();
            assertThat(r).as("spinning workers").isEqualTo(runnable);
            assertThat(w).as("parked workers").isEqualTo(waiting);
        });
    }

    /** A timed poll on an empty queue ends empty after its timeout, spinning first or not. */
    @Test
    void timedPollEndsEmptyAfterItsTimeout() throws InterruptedException {
        for (long spin : new long[] {0, TimeUnit.MILLISECONDS.toNanos(1), TimeUnit.SECONDS.toNanos(1)}) {
            SpinThenParkQueue q = new SpinThenParkQueue(spin, () -> true);
            long t0 = System.nanoTime();
            assertThat(q.poll(5, TimeUnit.MILLISECONDS)).isNull();
            assertThat(System.nanoTime() - t0).isGreaterThanOrEqualTo(TimeUnit.MILLISECONDS.toNanos(5));
        }
    }

    /** The queue's other BlockingQueue methods keep its count: remove, drain, iterator removal. */
    @Test
    void removeDrainAndIteratorKeepTheCount() {
        SpinThenParkQueue q = new SpinThenParkQueue(0, () -> true);
        Runnable a = () -> { };
        Runnable b = () -> { };
        Runnable c = () -> { };
        q.offer(a);
        q.offer(b);
        q.offer(c);
        assertThat(q.size()).isEqualTo(3);
        assertThat(q.remove(b)).isTrue();
        assertThat(q.remove(b)).isFalse();
        assertThat(q.size()).isEqualTo(2);
        var it = q.iterator();
        assertThat(it.next()).isSameAs(a);
        it.remove();
        assertThat(q.size()).isEqualTo(1);
        assertThat(q.peek()).isSameAs(c);
        List<Runnable> out = new ArrayList<>();
        assertThat(q.drainTo(out)).isEqualTo(1);
        assertThat(out).containsExactly(c);
        assertThat(q.size()).isZero();
        assertThat(q.poll()).isNull();
        assertThatThrownBy(() -> q.drainTo(q)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new SpinThenParkQueue(-1, () -> true)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> q.offer(null)).isInstanceOf(NullPointerException.class);
    }
}
