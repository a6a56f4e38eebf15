package dev.kvtransfer.core.timing;

import dev.kvtransfer.api.ErrorHandler;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * The generation side's {@code <instance>_<rank>_gen_transfer_summary.csv} in the timing directory (TensorRT-LLM's
 * file of the same name and columns, {@code RequestID,gen_side_transfer_time(ms),kv_cache_size}): one row per
 * request a generation status check reported completed, with the values the group's bandwidth all-gather merged
 * ({@link #merge}). Opened (truncated) at the first row, flushed after every batch; written by the status-check
 * thread, as upstream.
 */
public final class GenTransferSummary implements AutoCloseable {
    /** The header line. */
    public static final String HEADER = "RequestID,gen_side_transfer_time(ms),kv_cache_size";
    /** Longs per request in the all-gather: context request id, start and end (epoch ns, 0 = unknown), bytes. */
    public static final int FIELDS = 4;

    private final Path file;
    private final ErrorHandler errors;
    private BufferedWriter out;
    private boolean closed;

    /**
     * @param dir          the timing directory (created at the first row if missing)
     * @param instanceName the instance's name
     * @param rank         this rank's index in its instance
     * @param errors       where I/O errors go (a failed row never fails a status check)
     */
    public GenTransferSummary(Path dir, String instanceName, int rank, ErrorHandler errors) {
        this.file = Objects.requireNonNull(dir, "dir").resolve(instanceName + "_" + rank
                + "_gen_transfer_summary.csv");
        this.errors = Objects.requireNonNull(errors, "errors");
    }

    /** @return the file */
    public Path file() {
        return file;
    }

    /**
     * Merges the members' contributions by request id, as upstream's key-based merge (members may list different
     * requests, in any order): the earliest known start, the latest end, the sum of the bytes.
     *
     * @param gathered one array per member of {@link #FIELDS}-long records
     * @return request id to {@code {start, end, bytes}}
     */
    public static Map<Long, long[]> merge(List<long[]> gathered) {
        Map<Long, long[]> m = new HashMap<>();
        for (long[] member : gathered) {
            for (int i = 0; i + FIELDS <= member.length; i += FIELDS) {
                long[] e = m.computeIfAbsent(member[i], k -> new long[] {0, 0, 0});
                long start = member[i + 1];
                if (start != 0 && (e[0] == 0 || start < e[0])) {
                    e[0] = start;
                }
                e[1] = Math.max(e[1], member[i + 2]);
                e[2] += member[i + 3];
            }
        }
        return m;
    }

    /**
     * @param merged a {@link #merge} value
     * @return end minus start in nanoseconds, at least 0 (0 when either is unknown)
     */
    public static long nanos(long[] merged) {
        return merged[0] == 0 || merged[1] == 0 ? 0 : Math.max(0, merged[1] - merged[0]);
    }

    /**
     * Appends one batch of rows and flushes.
     *
     * @param rows {@code (request id, nanos, bytes)} triples
     */
    public synchronized void write(long[] rows) {
        if (closed || rows.length == 0) {
            return;
        }
        try {
            if (out == null) {
                Files.createDirectories(file.getParent());
                out = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                        StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
                out.write(HEADER);
                out.newLine();
            }
            for (int i = 0; i + 3 <= rows.length; i += 3) {
                out.write(rows[i] + "," + String.format(Locale.ROOT, "%.3f", rows[i + 1] / 1e6) + "," + rows[i + 2]);
                out.newLine();
            }
            out.flush();
        } catch (IOException | RuntimeException e) {
            errors.onError(new UncheckedIOException(file + ": " + rows.length / 3 + " summary rows not written",
                    e instanceof IOException io ? io : new IOException(e)));
        }
    }

    @Override
    public synchronized void close() {
        closed = true;
        if (out != null) {
            try {
                out.close();
            } catch (IOException e) {
                errors.onError(e);
            }
            out = null;
        }
    }
}
