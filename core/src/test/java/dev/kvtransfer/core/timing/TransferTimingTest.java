package dev.kvtransfer.core.timing;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;

class TransferTimingTest {
    @Test
    void rowHasStageDeltasAndPerMeasureDelayDurationBandwidth() {
        long ms = 1_000_000;
        TransferTiming t = new TransferTiming(42, 1000 * ms);
        t.requestInfo(1001 * ms);
        t.preparation(1003 * ms);
        t.preprocessAtMost(1006 * ms);
        t.measure(0, 1006 * ms, 1008 * ms, 250_000_000);      // 2 ms, 1 Gbit/ms... = 1000 Gbps
        t.measure(1, 1007 * ms, 1011 * ms, 1_000_000);        // 4 ms, 2 Gbps
        t.postprocess(1012 * ms);
        assertThat(TransferTiming.header(2)).isEqualTo("RequestID,RequestInfo,Preparation,Preprocess,Transmissions,"
                + "Postprocess,Delay,Duration,Bandwidth(Gbps),Delay,Duration,Bandwidth(Gbps)");
        // As upstream prints doubles (std::ostream defaults): no fixed decimals, no trailing zeros.
        assertThat(t.csvRow()).isEqualTo("42,1,2,3,5,1,0,2,1000,1,4,2");
        assertThat(t.measuredBytes()).isEqualTo(251_000_000);
    }

    @Test
    void unsetStagesPrintAsUpstreamDoes() {
        TransferTiming t = new TransferTiming(7, 5_000_000);
        t.postprocess(9_000_000);
        t.measure(0, 9_000_000, 9_250_000, 1);
        // Upstream writes the literal "0.0" for an unset stage; preprocess is then set by the measure.
        assertThat(t.csvRow()).startsWith("7,0.0,0.0,4,");
    }

    @Test
    void aSessionWithoutMeasuresWritesNoRow() {
        TransferTiming t = new TransferTiming(8, 5_000_000);
        t.postprocess(9_000_000);
        assertThat(t.csvRow()).isNull();
    }

    @Test
    void doublesPrintAsCppOstreamPrintsThem() {
        // Expected strings printed by g++ 12 with std::cout << double (Debian 12, this machine).
        double[] v = {0.5, 100.0, 123456.7, 1234567.0, 0.0001234, 0.00001234, 12.345678, 0.1, 1e-7, 3.14159265,
            999999.5, 99999.95, 2.5e-5, 1234.5678, 0.000123456789, 7.0, 1e21, 42.42424242, 0.0009999996, 1.0 / 3};
        String[] cpp = {"0.5", "100", "123457", "1.23457e+06", "0.0001234", "1.234e-05", "12.3457", "0.1", "1e-07",
            "3.14159", "1e+06", "99999.9", "2.5e-05", "1234.57", "0.000123457", "7", "1e+21", "42.4242", "0.001",
            "0.333333"};
        for (int i = 0; i < v.length; i++) {
            assertThat(TransferTiming.cpp(v[i])).as("%s", v[i]).isEqualTo(cpp[i]);
        }
        assertThat(TransferTiming.cpp(8.0 / 0.0)).isEqualTo("inf");
        assertThat(TransferTiming.cpp(0)).isEqualTo("0");
    }

    @Test
    void writerPutsSendAndReceiveRowsInTheirRankFiles(@TempDir Path dir) throws Exception {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        TimingCsvWriter w = new TimingCsvWriter(dir.resolve("timing"), 3, errors::add);
        TransferTiming a = new TransferTiming(1, 0);
        a.measure(0, 1, 2, 3);
        w.submit(true, a);
        w.submit(false, new TransferTiming(2, 0)); // nothing moved: no row, no file
        TransferTiming b = new TransferTiming(3, 0);
        b.measure(1, 5, 9, 4);
        w.submit(false, b);
        assertThat(w.closeAndWait(Duration.ofSeconds(10))).isTrue();
        assertThat(Files.readAllLines(dir.resolve("timing/rank_3_send.csv")))
                .containsExactly(TransferTiming.header(1), a.csvRow());
        assertThat(Files.readAllLines(dir.resolve("timing/rank_3_recv.csv")))
                .containsExactly(TransferTiming.header(1), b.csvRow());
        assertThat(errors).isEmpty();
    }

    @Test
    void measuresGrowFromNoneAndKeepEveryPeersFigures() {
        TransferTiming t = new TransferTiming(7, 0);
        assertThat(t.measureCount()).isZero();
        assertThat(t.measuredBytes()).isZero();
        long bytes = 0;
        for (int p = 0; p < 37; p++) { // one array for a single peer, then doubling: 1, 2, 4, ... 64 measures
            t.measure(p, 10 + p, 20 + 2L * p, 1000L + p);
            bytes += 1000L + p;
            assertThat(t.measureCount()).isEqualTo(p + 1);
            assertThat(t.measuredBytes()).isEqualTo(bytes);
        }
        String[] row = t.csvRow().split(",");
        assertThat(row).hasSize(6 + 37 * 3);
    }
}
