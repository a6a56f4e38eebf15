package dev.kvtransfer.core.timing;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class GenTransferSummaryTest {
    @TempDir
    Path dir;

    @Test
    void mergeKeysByRequestIdWithEarliestStartLatestEndAndSummedBytes() {
        // Members list different requests in different orders; a start of 0 (unknown) never wins.
        Map<Long, long[]> m = GenTransferSummary.merge(List.of(
                new long[] {7, 100, 900, 10, 8, 50, 60, 1},
                new long[] {8, 40, 70, 2, 7, 0, 950, 20},
                new long[] {}));
        assertThat(m.get(7L)).containsExactly(100, 950, 30);
        assertThat(m.get(8L)).containsExactly(40, 70, 3);
        assertThat(GenTransferSummary.nanos(m.get(7L))).isEqualTo(850);
        assertThat(GenTransferSummary.nanos(new long[] {0, 5, 1})).isZero();
        assertThat(GenTransferSummary.nanos(new long[] {9, 5, 1})).as("never negative").isZero();
    }

    @Test
    void writesTheUpstreamHeaderOnceAndOneRowPerRequest() throws Exception {
        List<Throwable> errors = new ArrayList<>();
        GenTransferSummary s = new GenTransferSummary(dir.resolve("sub"), "gen", 3, errors::add);
        assertThat(s.file()).hasFileName("gen_3_gen_transfer_summary.csv").doesNotExist();
        s.write(new long[] {42, 12_345_678, 1024});
        s.write(new long[] {43, 500, 7, 44, 0, 0});
        s.close();
        s.write(new long[] {45, 1, 1}); // after close: dropped
        assertThat(Files.readAllLines(s.file())).containsExactly("RequestID,gen_side_transfer_time(ms),kv_cache_size",
                "42,12.346,1024", "43,0.001,7", "44,0.000,0");
        assertThat(errors).isEmpty();
    }

    @Test
    void anUnwritableDirectoryGoesToTheErrorHandler() throws Exception {
        Path file = Files.writeString(dir.resolve("not-a-dir"), "x");
        List<Throwable> errors = new ArrayList<>();
        GenTransferSummary s = new GenTransferSummary(file, "gen", 0, errors::add);
        s.write(new long[] {1, 1, 1});
        assertThat(errors).singleElement().satisfies(e -> assertThat(e).hasMessageContaining("1 summary rows not "
                + "written"));
        s.close();
    }
}
