package dev.kvtransfer.crosshost;

import io.aeron.CncFileDescriptor;
import io.aeron.driver.reports.LossReportReader;
import io.aeron.driver.reports.LossReportUtil;
import io.aeron.driver.status.SystemCounterDescriptor;
import org.agrona.IoUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.CountersReader;

import java.io.File;
import java.io.PrintStream;
import java.nio.MappedByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads the system counters (NAKs sent / received, retransmits, loss gap fills, bytes, errors, ...) and the loss
 * report of the media driver(s) embedded in this process, straight from their files, as Aeron's {@code AeronStat}
 * and {@code LossStat} do: the CnC file's counters buffers and {@code loss-report.dat} in the driver directory
 * ({@code /dev/shm/kvtransfer-aeron-<pid>-.../driver}, the backend's naming). No Aeron client is added.
 */
final class AeronDriverCounters {
    private AeronDriverCounters() {
    }

    /**
     * Prints {@code COUNTER <label>=<value>} for every system counter and {@code LOSS observations=<n>
     * bytes=<n>} summed over the loss report's entries, per driver directory of this process.
     *
     * @param out where to print
     */
    static void print(PrintStream out) {
        List<File> dirs = driverDirectories();
        if (dirs.isEmpty()) {
            out.println("COUNTER none: no driver directory of pid " + ProcessHandle.current().pid());
        }
        for (File dir : dirs) {
            File cnc = new File(dir, CncFileDescriptor.CNC_FILE);
            MappedByteBuffer cncBuffer = IoUtil.mapExistingFile(cnc, "cnc");
            try {
                UnsafeBuffer meta = CncFileDescriptor.createMetaDataBuffer(cncBuffer);
                CountersReader counters = new CountersReader(
                        CncFileDescriptor.createCountersMetaDataBuffer(cncBuffer, meta),
                        CncFileDescriptor.createCountersValuesBuffer(cncBuffer, meta));
                counters.forEach((id, typeId, key, label) -> {
                    if (typeId == SystemCounterDescriptor.SYSTEM_COUNTER_TYPE_ID) {
                        out.println("COUNTER " + label + "=" + counters.getCounterValue(id));
                    }
                });
            } finally {
                IoUtil.unmap(cncBuffer);
            }
            File report = LossReportUtil.file(dir.getAbsolutePath());
            if (report.exists()) {
                MappedByteBuffer lossBuffer = LossReportUtil.mapLossReportReadOnly(dir.getAbsolutePath());
                try {
                    long[] sum = new long[2];
                    LossReportReader.read(new UnsafeBuffer(lossBuffer),
                            (observations, bytes, first, last, session, stream, channel, source) -> {
                                sum[0] += observations;
                                sum[1] += bytes;
                            });
                    out.println("LOSS observations=" + sum[0] + " bytes=" + sum[1]);
                } finally {
                    IoUtil.unmap(lossBuffer);
                }
            } else {
                out.println("LOSS observations=0 bytes=0");
            }
        }
        out.flush();
    }

    private static List<File> driverDirectories() {
        String prefix = "kvtransfer-aeron-" + ProcessHandle.current().pid() + "-";
        List<File> out = new ArrayList<>();
        for (String base : List.of("/dev/shm", System.getProperty("java.io.tmpdir"))) {
            // The driver directory is <parent>/driver; the 0700 parent carries the name (backend-aeron EmbeddedDriver).
            File[] found = new File(base).listFiles((d, n) -> n.startsWith(prefix)
                    && new File(d, n + File.separator + "driver" + File.separator + CncFileDescriptor.CNC_FILE).exists());
            if (found != null) {
                for (File f : found) {
                    out.add(new File(f, "driver"));
                }
            }
        }
        return out;
    }
}
