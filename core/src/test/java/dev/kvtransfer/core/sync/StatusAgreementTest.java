package dev.kvtransfer.core.sync;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.OptionalInt;

import static org.assertj.core.api.Assertions.assertThat;

class StatusAgreementTest {
    private static final List<Long> PENDING = List.of(1L, 2L, 3L, 4L, 5L);

    @Test
    void contextSelectsOnlyIdsFinishedEverywhereThenOldestUntilAtLeast() {
        List<long[]> gathered = List.of(new long[] {2, 4, 5}, new long[] {4, 2}, new long[] {2, 4, 1});
        assertThat(StatusAgreement.selectContext(PENDING, gathered, OptionalInt.of(0))).containsExactly(2L, 4L);
        assertThat(StatusAgreement.selectContext(PENDING, gathered, OptionalInt.of(3))).containsExactly(2L, 4L, 1L);
        assertThat(StatusAgreement.selectContext(PENDING, gathered, OptionalInt.empty()))
                .containsExactly(1L, 2L, 3L, 4L, 5L);
        assertThat(StatusAgreement.selectContext(PENDING, gathered, OptionalInt.of(99))).hasSize(5);
    }

    @Test
    void generationPrefersIdsFinishedOnMostMembersThenOldestThenAllAgreed() {
        List<long[]> gathered = List.of(new long[] {3, 5}, new long[] {5, 3, 4}, new long[] {5, 4});
        // freq: 5 -> 3, 3 -> 2, 4 -> 2 (3 older than 4)
        assertThat(StatusAgreement.selectGeneration(PENDING, gathered, OptionalInt.of(2))).containsExactly(5L, 3L);
        assertThat(StatusAgreement.selectGeneration(PENDING, gathered, OptionalInt.of(0))).containsExactly(5L);
        assertThat(StatusAgreement.selectGeneration(PENDING, gathered, OptionalInt.of(4)))
                .containsExactly(5L, 3L, 4L, 1L);
        assertThat(StatusAgreement.selectGeneration(PENDING, gathered, OptionalInt.empty())).hasSize(5);
    }

    @Test
    void idsThisRankDoesNotHoldAreNeverSelectedAndDuplicatesCountOnce() {
        List<long[]> gathered = List.of(new long[] {9, 9, 2}, new long[] {9, 2});
        assertThat(StatusAgreement.finishedOnAll(PENDING, gathered)).containsExactly(2L);
        assertThat(StatusAgreement.selectGeneration(PENDING, List.of(new long[] {2, 2}, new long[] {}),
                OptionalInt.of(0))).isEmpty();
    }

    @Test
    void agreeReportsOnlyWhatEveryMemberFinishedFailedWhenAnyFailedAndCountsAMemberOnce() {
        // Member pairs: (id, 1 = ok / 0 = failed). Negative and large ids, a member listing an id twice.
        List<long[]> gathered = List.of(
                new long[] {7, 1, -3, 1, Long.MAX_VALUE, 0, 7, 0},
                new long[] {Long.MAX_VALUE, 1, 7, 1, -3, 1, 8, 1},
                new long[] {-3, 1, 7, 1, Long.MAX_VALUE, 1});
        StatusAgreement.Outcome o = StatusAgreement.agree(gathered);
        assertThat(o.outcome(7)).isTrue(); // the duplicate (7, failed) of member 0 is not counted
        assertThat(o.outcome(-3)).isTrue();
        assertThat(o.outcome(Long.MAX_VALUE)).isFalse();
        assertThat(o.outcome(8)).isNull(); // one member of three
        assertThat(o.outcome(99)).isNull();
        // A member listing an id twice does not make up for a member that never listed it.
        StatusAgreement.Outcome twice = StatusAgreement.agree(List.of(new long[] {5, 1, 5, 1}, new long[] {}));
        assertThat(twice.outcome(5)).isNull();
        assertThat(StatusAgreement.agree(List.of()).outcome(1)).isNull();
    }

    @Test
    void anySucceededIsTrueOnlyForAnIdEveryMemberFinishedWithoutFailure() {
        assertThat(StatusAgreement.agree(List.of(new long[] {1, 0, 2, 1})).anySucceeded()).isTrue();
        assertThat(StatusAgreement.agree(List.of(new long[] {1, 0})).anySucceeded()).isFalse();
        assertThat(StatusAgreement.agree(List.of(new long[] {3, 1}, new long[] {3, 0})).anySucceeded()).isFalse();
        assertThat(StatusAgreement.agree(List.of(new long[] {3, 1, 4, 1}, new long[] {4, 1})).anySucceeded())
                .isTrue();
        assertThat(StatusAgreement.agree(List.of(new long[] {5, 1, 5, 1}, new long[] {})).anySucceeded()).isFalse();
        assertThat(StatusAgreement.agree(List.of()).anySucceeded()).isFalse();
    }
}
