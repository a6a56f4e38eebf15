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
        assertThat(t.csvRow()).isEqualTo("42,1.000,2.000,3.000,5.000,1.000,0.000,2.000,1000.000,1.000,4.000,2.000");
        assertThat(t.measuredBytes()).isEqualTo(251_000_000);
    }

    @Test
    void unsetStagesPrintAsZero() {
        TransferTiming t = new TransferTiming(7, 5_000_000);
        t.postprocess(9_000_000);
        assertThat(t.csvRow()).isEqualTo("7,0.0,0.0,0.0,0.0,4.000");
    }

    @Test
    void writerPutsSendAndReceiveRowsInTheirRankFiles(@TempDir Path dir) throws Exception {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        TimingCsvWriter w = new TimingCsvWriter(dir.resolve("timing"), 3, errors::add);
        TransferTiming a = new TransferTiming(1, 0);
        a.measure(0, 1, 2, 3);
        w.submit(true, a);
        w.submit(false, new TransferTiming(2, 0));
        assertThat(w.closeAndWait(Duration.ofSeconds(10))).isTrue();
        assertThat(Files.readAllLines(dir.resolve("timing/rank_3_send.csv")))
                .containsExactly(TransferTiming.header(1), a.csvRow());
        assertThat(Files.readAllLines(dir.resolve("timing/rank_3_recv.csv")))
                .containsExactly(TransferTiming.header(0), "2,0.0,0.0,0.0,0.0,0.0");
        assertThat(errors).isEmpty();
    }
}
