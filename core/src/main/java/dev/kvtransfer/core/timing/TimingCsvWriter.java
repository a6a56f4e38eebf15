package dev.kvtransfer.core.timing;

import dev.kvtransfer.api.ErrorHandler;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Writes {@code rank_<selfIndex>_send.csv} (context side) and {@code rank_<selfIndex>_recv.csv} (generation
 * side) in a timing directory, the format of TensorRT-LLM's {@code TRTLLM_KVCACHE_TIME_OUTPUT_PATH} files, on
 * its own thread so transfer threads only enqueue. The header is written with the first row's measure count
 * (rows with other counts keep their own column count, as upstream). Files are truncated at the first row.
 */
public final class TimingCsvWriter implements AutoCloseable {
    private static final Object STOP = new Object();

    private final Path sendFile;
    private final Path recvFile;
    private final ErrorHandler errors;
    private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>(65_536);
    private final Thread thread;
    private BufferedWriter send;
    private BufferedWriter recv;
    private volatile boolean closed;

    /**
     * Starts the writer thread.
     *
     * @param dir       the timing directory (created if missing)
     * @param selfIndex this rank's index, part of the file names
     * @param errors    where I/O errors go
     */
    public TimingCsvWriter(Path dir, int selfIndex, ErrorHandler errors) {
        Objects.requireNonNull(dir, "dir");
        this.errors = Objects.requireNonNull(errors, "errors");
        this.sendFile = dir.resolve("rank_" + selfIndex + "_send.csv");
        this.recvFile = dir.resolve("rank_" + selfIndex + "_recv.csv");
        try {
            Files.createDirectories(dir);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create timing directory " + dir, e);
        }
        this.thread = new Thread(this::run, "kvt-timing-rank-" + selfIndex);
        thread.setDaemon(true);
        thread.start();
    }

    /** @return the context-side file */
    public Path sendFile() {
        return sendFile;
    }

    /** @return the generation-side file */
    public Path recvFile() {
        return recvFile;
    }

    /**
     * Queues one row; drops it (reporting the drop) when the queue is full, rather than stall a transfer.
     *
     * @param sender true for the send file
     * @param timing the request's timing
     */
    public void submit(boolean sender, TransferTiming timing) {
        if (closed) {
            return;
        }
        if (!queue.offer(new Row(sender, timing))) {
            errors.onError(new IllegalStateException("timing queue full: row of request " + timing.requestId()
                    + " dropped"));
        }
    }

    private record Row(boolean sender, TransferTiming timing) {
    }

    private void run() {
        try {
            while (true) {
                Object o = queue.poll(1, TimeUnit.SECONDS);
                if (o == STOP) {
                    break;
                }
                if (o == null) {
                    flush();
                    continue;
                }
                write((Row) o);
                if (queue.isEmpty()) {
                    flush();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            // Whatever is still queued (close raced a submit) is written before the files close.
            Object o;
            while ((o = queue.poll()) != null) {
                if (o instanceof Row r) {
                    write(r);
                }
            }
            closeQuietly();
        }
    }

    private void write(Row r) {
        String row = r.timing.csvRow();
        if (row == null) {
            return; // as upstream: a session without measures (nothing moved on this rank) writes no row
        }
        try {
            BufferedWriter w = r.sender ? send : recv;
            if (w == null) {
                Path file = r.sender ? sendFile : recvFile;
                w = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                        StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
                w.write(TransferTiming.header(r.timing.measureCount()));
                w.newLine();
                if (r.sender) {
                    send = w;
                } else {
                    recv = w;
                }
            }
            w.write(row);
            w.newLine();
        } catch (IOException | RuntimeException e) {
            errors.onError(new UncheckedIOException("timing row of request " + r.timing.requestId()
                    + " not written", e instanceof IOException io ? io : new IOException(e)));
        }
    }

    private void flush() {
        try {
            if (send != null) {
                send.flush();
            }
            if (recv != null) {
                recv.flush();
            }
        } catch (IOException e) {
            errors.onError(e);
        }
    }

    private void closeQuietly() {
        for (BufferedWriter w : new BufferedWriter[] {send, recv}) {
            if (w != null) {
                try {
                    w.close();
                } catch (IOException e) {
                    errors.onError(e);
                }
            }
        }
    }

    /**
     * Writes what is queued, closes the files and stops the thread (waits at most a few seconds).
     *
     * @return true when the thread stopped in time
     */
    public boolean closeAndWait(Duration timeout) {
        if (!closed) {
            closed = true;
            // The queue is bounded; STOP must get in, so make room by waiting a little if needed.
            try {
                if (!queue.offer(STOP, timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                    thread.interrupt();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                thread.interrupt();
            }
        }
        try {
            thread.join(Math.max(1, timeout.toMillis()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return !thread.isAlive();
    }

    @Override
    public void close() {
        closeAndWait(Duration.ofSeconds(5));
    }
}
