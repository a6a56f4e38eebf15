package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.core.transfer.GenerationRequests.Failure;
import dev.kvtransfer.core.transfer.GenerationRequests.Phase;
import dev.kvtransfer.core.transfer.GenerationRequests.ReadyOutcome;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link GenerationRequests} over generated interleavings of what the engine, the request threads and the clock do:
 * submit, a thread taking the request, counterparts learnt, ready signals (agreeing or not),
 * cancel, deadlines passing, close, and threads ending requests. Invariants: every request ends exactly once
 * (failed once, or ended by its thread), a request being asked for is never failed by cancel or close,
 * ALL_READY comes once and only after every counterpart agreed, and nothing stays tracked at the end.
 */
class GenerationRequestsModelTest {
    private static final long TIMEOUT = 1_000;

    private record Local(int id) {
    }

    private sealed interface Event permits Submit, Take, Ready, Cancel, Tick, Finish, Close {
    }

    private record Submit(int request) implements Event {
    }

    /** A request thread takes the request and learns it has {@code counterparts} counterparts. */
    private record Take(int request, int counterparts) implements Event {
    }

    private record Ready(int request, boolean push, boolean layered) implements Event {
    }

    private record Cancel(int request) implements Event {
    }

    private record Tick(long advance) implements Event {
    }

    /** The request thread ends the request (success or failure). */
    private record Finish(int request) implements Event {
    }

    private record Close() implements Event {
    }

    @Provide
    Arbitrary<List<Event>> runs() {
        Arbitrary<Integer> req = Arbitraries.integers().between(0, 4);
        Arbitrary<Event> submit = req.map(Submit::new);
        Arbitrary<Event> take = Combinators.combine(req, Arbitraries.integers().between(0, 3)).as(Take::new);
        Arbitrary<Event> ready = Combinators.combine(req, Arbitraries.frequency(Tuple.of(9, false), Tuple.of(1, true)),
                Arbitraries.frequency(Tuple.of(9, false), Tuple.of(1, true))).as(Ready::new);
        Arbitrary<Event> cancel = req.map(Cancel::new);
        Arbitrary<Event> tick = Arbitraries.longs().between(0, TIMEOUT).map(Tick::new);
        Arbitrary<Event> finish = req.map(Finish::new);
        Arbitrary<Event> close = Arbitraries.just(new Close());
        return Arbitraries.frequencyOf(Tuple.of(4, submit), Tuple.of(4, take), Tuple.of(6, ready),
                Tuple.of(2, cancel), Tuple.of(2, tick), Tuple.of(3, finish), Tuple.of(1, close))
                .list().ofMinSize(1).ofMaxSize(60);
    }

    @Property(tries = 2000)
    void everyRequestEndsExactlyOnceAndAskingOnesOnlyByTheirOwnOutcome(@ForAll("runs") List<Event> run) {
        GenerationRequests<Local> m = new GenerationRequests<>();
        Map<Integer, Local> live = new HashMap<>();
        Map<Local, Integer> ends = new HashMap<>();
        Map<Local, Integer> allReady = new HashMap<>();
        Map<Local, Integer> readies = new HashMap<>();
        Map<Local, Integer> expected = new HashMap<>();
        Map<Local, Boolean> asking = new HashMap<>();
        long now = 0;
        int serial = 0;
        List<Failure<Local>> out = new ArrayList<>();
        for (Event e : run) {
            if (e instanceof Submit s) {
                Local l = new Local(serial++);
                Failure<Local> f = m.submit(l, s.request(), now + TIMEOUT);
                if (f == null) {
                    live.put(s.request(), l);
                    ends.put(l, 0);
                } else {
                    assertThat(f.code()).isEqualTo(ErrorCode.CANCELLED); // only after close
                }
            } else if (e instanceof Take t) {
                Local l = live.get(t.request());
                if (l != null && m.queued(l)) {
                    Failure<Local> f = m.begin(l, now);
                    if (f != null) {
                        assertThat(f.code()).isIn(ErrorCode.CANCELLED, ErrorCode.TIMEOUT);
                        ends.merge(l, 1, Integer::sum);
                    } else {
                        asking.put(l, true);
                        m.expect(l, t.counterparts());
                        expected.put(l, t.counterparts());
                        assertThat(m.phase(l)).isEqualTo(t.counterparts() == 0 ? Phase.RECEIVING : Phase.ASKING);
                    }
                }
            } else if (e instanceof Ready r) {
                Local l = live.get(r.request());
                if (l != null) {
                    out.clear();
                    boolean wasAsking = m.phase(l) == Phase.ASKING;
                    ReadyOutcome o = m.ready(l, r.push(), r.layered(), out);
                    if (o == ReadyOutcome.ALL_READY) {
                        allReady.merge(l, 1, Integer::sum);
                        readies.merge(l, 1, Integer::sum);
                        assertThat(readies.get(l)).isEqualTo(expected.get(l));
                        assertThat(m.phase(l)).isEqualTo(Phase.RECEIVING);
                    } else if (o == ReadyOutcome.WAIT) {
                        readies.merge(l, 1, Integer::sum);
                        assertThat(readies.get(l)).isLessThan(expected.get(l));
                    } else if (!out.isEmpty()) {
                        assertThat(wasAsking).isTrue();
                        assertThat(out).singleElement().satisfies(f -> assertThat(f.code())
                                .isEqualTo(ErrorCode.MALFORMED));
                        ends.merge(l, 1, Integer::sum); // the thread fails it; end() follows
                    }
                }
            } else if (e instanceof Cancel c) {
                Local l = live.get(c.request());
                if (l != null) {
                    Phase before = m.phase(l);
                    Failure<Local> f = m.cancel(l);
                    assertThat(f != null).isEqualTo(before == Phase.QUEUED);
                    if (f != null) {
                        ends.merge(l, 1, Integer::sum);
                    }
                }
            } else if (e instanceof Tick t) {
                now += t.advance(); // a request taken after its deadline then fails at begin
            } else if (e instanceof Finish fin) {
                Local l = live.get(fin.request());
                if (l != null && asking.containsKey(l) && m.end(l)) {
                    if (ends.get(l) == 0) {
                        ends.merge(l, 1, Integer::sum); // ended by its own outcome
                    }
                    live.remove(fin.request());
                }
            } else if (e instanceof Close) {
                out.clear();
                m.close(out);
                for (Failure<Local> f : out) {
                    assertThat(asking).doesNotContainKey(f.local());
                    ends.merge(f.local(), 1, Integer::sum);
                }
            }
            for (Map.Entry<Local, Integer> x : ends.entrySet()) {
                assertThat(x.getValue()).as("ends of %s", x.getKey()).isLessThanOrEqualTo(1);
            }
            for (Map.Entry<Local, Integer> x : allReady.entrySet()) {
                assertThat(x.getValue()).as("ALL_READY of %s", x.getKey()).isEqualTo(1);
            }
        }
        // Wind down: close, then every thread ends what it took.
        out.clear();
        m.close(out);
        for (Failure<Local> f : out) {
            ends.merge(f.local(), 1, Integer::sum);
        }
        for (Local l : m.tracked()) {
            assertThat(asking).as("only taken requests survive close").containsKey(l);
            m.end(l);
            if (ends.get(l) == 0) {
                ends.merge(l, 1, Integer::sum);
            }
        }
        assertThat(m.size()).isZero();
        for (Map.Entry<Local, Integer> x : ends.entrySet()) {
            assertThat(x.getValue()).as("ends of %s", x.getKey()).isEqualTo(1);
        }
    }

    @Test
    void counterpartsThatDisagreeOnPushFailTheRequestMalformed() {
        GenerationRequests<Local> m = new GenerationRequests<>();
        Local l = new Local(1);
        assertThat(m.submit(l, 7, TIMEOUT)).isNull();
        assertThat(m.begin(l, 0)).isNull();
        m.expect(l, 2);
        List<Failure<Local>> out = new ArrayList<>();
        assertThat(m.ready(l, true, false, out)).isEqualTo(ReadyOutcome.WAIT);
        assertThat(m.ready(l, false, false, out)).isEqualTo(ReadyOutcome.FAILED);
        assertThat(out).singleElement().satisfies(f -> {
            assertThat(f.requestId()).isEqualTo(7);
            assertThat(f.reason()).contains("disagree on push/pull");
        });
        assertThat(m.cancel(l)).as("asking: not cancellable").isNull();
        assertThat(m.end(l)).isTrue();
        assertThat(m.size()).isZero();
    }

    @Test
    void aQueuedRequestTakenPastItsDeadlineFailsWithTimeout() {
        GenerationRequests<Local> m = new GenerationRequests<>();
        Local l = new Local(2);
        m.submit(l, 8, TIMEOUT);
        assertThat(m.queued(l)).isTrue();
        assertThat(m.begin(l, TIMEOUT)).satisfies(f -> {
            assertThat(f.code()).isEqualTo(ErrorCode.TIMEOUT);
            assertThat(f.requestId()).isEqualTo(8);
        });
        assertThat(m.queued(l)).isFalse();
        assertThatThrownBy(() -> m.begin(l, TIMEOUT)).isInstanceOf(IllegalStateException.class);
    }
}
