package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.transfer.ContextRequests.Dispatch;
import dev.kvtransfer.core.transfer.ContextRequests.Failure;
import dev.kvtransfer.core.transfer.ContextRequests.Outbox;
import dev.kvtransfer.core.transfer.ContextRequests.Refusal;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ContextRequests} against its contract, over every interleaving jqwik generates of the events the fault
 * suites inject: requests made ready (twice, too), infos in any order, duplicated, different, late, of an
 * unsupported or disagreeing layout, cancels, deadlines passing, and close. Invariants checked after every run:
 * every local request ends exactly once (dispatched or failed), every fresh info is answered exactly once
 * (refused or dispatched) and a duplicate at most once, nothing is dispatched before it is ready and fully asked for,
 * nothing cancelled is dispatched, and once every deadline passed nothing is pending.
 */
class ContextRequestsModelTest {
    private static final long TIMEOUT = 1_000_000_000L;

    /** A local request (the engine's handle): identity matters, not the id. */
    private record Local(long id, int serial) {
    }

    /** One event of a run. */
    private sealed interface Event permits Ready, Info, Cancel, Tick {
    }

    private record Ready(int request) implements Event {
    }

    /** variant: 0 fresh, 1 copy of the last info of that position, 2 another tag, 3 unsupported, 4 other layout. */
    private record Info(int request, int position, int variant) implements Event {
    }

    private record Cancel(int request) implements Event {
    }

    private record Tick(long advanceNanos) implements Event {
    }

    private static CacheState cache(int tp, int tokensPerBlock) {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(tokensPerBlock)
                .tensorParallelism(tp).build();
    }

    @Provide
    Arbitrary<List<Event>> runs() {
        Arbitrary<Event> ready = Arbitraries.integers().between(0, 3).map(Ready::new);
        Arbitrary<Event> info = Combinators.combine(Arbitraries.integers().between(0, 3),
                Arbitraries.integers().between(0, 3), Arbitraries.integers().between(0, 4)
                        .withDistribution(net.jqwik.api.RandomDistribution.uniform()))
                .as(Info::new);
        Arbitrary<Event> cancel = Arbitraries.integers().between(0, 3).map(Cancel::new);
        Arbitrary<Event> tick = Arbitraries.longs().between(0, TIMEOUT * 3 / 4).map(Tick::new);
        return Arbitraries.frequencyOf(
                net.jqwik.api.Tuple.of(4, ready), net.jqwik.api.Tuple.of(8, info),
                net.jqwik.api.Tuple.of(1, cancel), net.jqwik.api.Tuple.of(2, tick))
                .list().ofMinSize(1).ofMaxSize(60);
    }

    @Property(tries = 2000)
    void everyRequestAndEveryAskerGetsExactlyOneAnswer(@ForAll("runs") List<Event> run,
                                                       @ForAll @IntRange(min = 0, max = 2) int log2) {
        Harness h = new Harness(1 << log2, 3); // 1, 2 or 4 counterparts (TP is a power of two)
        for (Event e : run) {
            h.apply(e);
        }
        h.apply(new Tick(TIMEOUT * 2)); // every deadline passes
        h.checkSettled();
        h.close();
        h.checkSettled();
        assertThat(h.requests.pendingCount()).isZero();
    }

    @Property(tries = 300)
    void aRequestEveryCounterpartAskedForIsDispatchedOnceWhateverTheOrder(
            @ForAll @IntRange(min = 0, max = 2) int log2, @ForAll long seed,
            @ForAll @IntRange(min = 0, max = 4) int readyAt) {
        int n = 1 << log2;
        Harness h = new Harness(n, 1000);
        List<Integer> positions = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            positions.add(i);
        }
        java.util.Collections.shuffle(positions, new java.util.Random(seed));
        for (int step = 0; step < n; step++) {
            if (step == readyAt) {
                h.apply(new Ready(0));
            }
            assertThat(h.dispatched).as("dispatched before every counterpart asked").isEmpty();
            h.apply(new Info(0, positions.get(step), 0));
        }
        if (readyAt >= n) {
            assertThat(h.dispatched).as("dispatched before the request was ready").isEmpty();
            h.apply(new Ready(0));
        }
        assertThat(h.dispatched).singleElement().satisfies(d -> assertThat(d.requestId()).isZero());
        h.apply(new Tick(TIMEOUT * 2));
        h.checkSettled();
    }

    @Test
    void aTimeoutFailsTheLocalRequestAndRefusesItsAskersWithTimeout() {
        Harness h = new Harness(2, 1000);
        h.apply(new Ready(1));
        h.apply(new Info(1, 0, 0));
        h.apply(new Tick(TIMEOUT + 1));
        assertThat(h.failures).singleElement().satisfies(f -> {
            assertThat(f.code()).isEqualTo(ErrorCode.TIMEOUT);
            assertThat(f.reason()).contains("1 of 2 counterparts asked");
        });
        assertThat(h.refusals).singleElement().satisfies(r -> assertThat(r.code()).isEqualTo(ErrorCode.TIMEOUT));
        h.checkSettled();
    }

    @Test
    void aCancelledRequestRefusesLaterAskersUntilItsDeadline() {
        Harness h = new Harness(1, 1000);
        h.apply(new Ready(2));
        h.apply(new Cancel(2));
        h.apply(new Info(2, 0, 0));
        assertThat(h.refusals).singleElement().satisfies(r -> {
            assertThat(r.code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(r.requestId()).isEqualTo(2);
        });
        assertThat(h.dispatched).isEmpty();
        h.apply(new Tick(TIMEOUT + 1));
        h.checkSettled();
    }

    @Test
    void tooManyPendingRequestsAreRefusedNamingTheLimit() {
        Harness h = new Harness(2, 2);
        h.apply(new Info(0, 0, 0));
        h.apply(new Info(1, 0, 0));
        h.apply(new Info(2, 0, 0));
        h.apply(new Ready(3));
        assertThat(h.refusals).singleElement().satisfies(r -> {
            assertThat(r.code()).isEqualTo(ErrorCode.INTERNAL);
            assertThat(r.reason()).contains("too many pending requests (2)");
        });
        assertThat(h.failures).singleElement().satisfies(f -> assertThat(f.reason())
                .contains("kvtransfer.maxPendingRequests"));
    }

    /** Drives one state machine and records every answer. */
    private static final class Harness {
        final int counterparts;
        final ContextRequests<String, Local> requests;
        final Outbox<String, Local> out = new Outbox<>();
        final CacheState self = cache(1, 16);
        final TargetRanks targets;
        long now = 1;
        int serial;
        final List<Dispatch<String, Local>> dispatched = new ArrayList<>();
        final List<Failure<Local>> failures = new ArrayList<>();
        final List<Refusal<String>> refusals = new ArrayList<>();
        /** Each local request made ready, with its outcomes so far. */
        final Map<Local, Integer> locals = new IdentityHashMap<>();
        final Map<Local, Boolean> cancelled = new IdentityHashMap<>();
        /** Each info delivered, whether it was fresh, and its answers so far. */
        final Map<RequestInfo, int[]> infos = new IdentityHashMap<>();
        final Map<RequestInfo, Boolean> fresh = new IdentityHashMap<>();
        final Map<Long, List<RequestInfo>> delivered = new java.util.HashMap<>();
        final Map<String, RequestInfo> lastAt = new java.util.HashMap<>();
        final Map<Long, Local> readyLocal = new java.util.HashMap<>();
        int tag = 4096;

        Harness(int counterparts, int maxPending) {
            this.counterparts = counterparts;
            this.requests = new ContextRequests<>(0, maxPending, TIMEOUT);
            this.targets = RankMapping.targetRanks(cache(counterparts, 16), self, 0);
            assertThat(targets.size()).isEqualTo(counterparts);
        }

        TransceiverState requester(int position, int tokensPerBlock) {
            List<String> addresses = new ArrayList<>();
            for (int i = 0; i < counterparts; i++) {
                addresses.add("gen-" + i);
            }
            return new TransceiverState(cache(counterparts, tokensPerBlock), new CommState("test", addresses,
                    position));
        }

        java.util.Set<Integer> askedPositions(long id) {
            java.util.Set<Integer> s = new java.util.HashSet<>();
            for (RequestInfo i : delivered.getOrDefault(id, List.of())) {
                s.add(i.requesterState().selfIndex());
            }
            return s;
        }

        void apply(Event e) {
            if (e instanceof Ready r) {
                Local l = new Local(r.request(), serial++);
                locals.put(l, 0);
                readyLocal.putIfAbsent((long) r.request(), l);
                requests.localReady(r.request(), l, now, out);
            } else if (e instanceof Info i) {
                int pos = i.position() % counterparts;
                String key = i.request() + "/" + pos;
                RequestInfo info;
                Support support = Support.yes();
                RequestInfo last = lastAt.get(key);
                if (i.variant() == 1 && last != null) {
                    info = new RequestInfo(last.requestId(), 0, new long[0], last.requesterState(), last.dataTag(), 0);
                } else {
                    info = new RequestInfo(i.request(), 0, new long[0], requester(pos, i.variant() == 4 ? 32 : 16),
                            i.variant() == 2 ? ++tag : 4096, 0);
                    if (i.variant() == 3) {
                        support = Support.no("test: unsupported");
                    }
                }
                boolean isFresh = delivered.computeIfAbsent((long) i.request(), k -> new ArrayList<>()).stream()
                        .noneMatch(info::equals);
                delivered.get((long) i.request()).add(info);
                lastAt.put(key, info);
                infos.put(info, new int[1]);
                fresh.put(info, isFresh);
                requests.info("gen-" + pos, info, support, support.supported() ? targets : null,
                        support.supported() ? pos : -1, now, out);
            } else if (e instanceof Cancel c) {
                Local l = readyLocal.get((long) c.request());
                if (l != null && requests.cancel(c.request(), l, out)) {
                    cancelled.put(l, true);
                }
            } else if (e instanceof Tick t) {
                now += t.advanceNanos();
                requests.tick(now, out);
            }
            collect();
        }

        void close() {
            requests.close(out);
            collect();
        }

        private void collect() {
            for (Failure<Local> f : out.failures) {
                failures.add(f);
                assertThat(locals).containsKey(f.local());
                locals.merge(f.local(), 1, Integer::sum);
                assertThat(f.requestId()).isEqualTo(f.local().id());
            }
            for (Refusal<String> r : out.refusals) {
                refusals.add(r);
                assertThat(infos).as("refusal of an info never delivered").containsKey(r.info());
                infos.get(r.info())[0]++;
                assertThat(r.conn()).isEqualTo("gen-" + r.info().requesterState().selfIndex());
                assertThat(r.reason()).isNotBlank();
            }
            for (Dispatch<String, Local> d : out.dispatches) {
                dispatched.add(d);
                assertThat(cancelled).as("a cancelled request was dispatched").doesNotContainKey(d.local());
                locals.merge(d.local(), 1, Integer::sum);
                assertThat(d.asked()).hasSize(counterparts);
                for (int k = 0; k < counterparts; k++) {
                    RequestInfo info = d.asked().get(k).info();
                    assertThat(info.requesterState().selfIndex()).as("asked in target order").isEqualTo(k);
                    assertThat(info.requestId()).isEqualTo(d.requestId());
                    infos.get(info)[0]++;
                }
                assertThat(d.targets()).isEqualTo(targets);
            }
            out.clear();
            for (Map.Entry<Local, Integer> l : locals.entrySet()) {
                assertThat(l.getValue()).as("outcomes of %s", l.getKey()).isLessThanOrEqualTo(1);
            }
            for (Map.Entry<RequestInfo, int[]> i : infos.entrySet()) {
                assertThat(i.getValue()[0]).as("answers to an info of request %d", i.getKey().requestId())
                        .isLessThanOrEqualTo(1);
            }
        }

        void checkSettled() {
            for (Map.Entry<Local, Integer> l : locals.entrySet()) {
                assertThat(l.getValue()).as("outcomes of %s once every deadline passed", l.getKey()).isEqualTo(1);
            }
            for (Map.Entry<RequestInfo, int[]> i : infos.entrySet()) {
                if (fresh.get(i.getKey())) {
                    assertThat(i.getValue()[0]).as("answers to a fresh info of request %d",
                            i.getKey().requestId()).isEqualTo(1);
                }
            }
            assertThat(requests.pendingCount()).isZero();
        }
    }
}
