package dev.kvtransfer.soak;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;

/**
 * What one soak run does.
 *
 * @param backend        transport provider name ({@code aeron}, {@code ucx})
 * @param duration       how long requests are issued (the drain and the closing come after)
 * @param phase          how long each fault phase lasts (the warm-up lasts one phase too)
 * @param inflight       requests kept in flight at once
 * @param seed           seed of the prompt lengths and cancel delays
 * @param out            directory of report.md, report.json and the children's logs
 * @param requestTimeout each request's transfer deadline ({@code kvtransfer.kvTransferTimeoutMs})
 * @param hangGrace      how long past its deadline a request may take to end before it counts as a hang
 * @param maxBlocks      most blocks of one request (prompt lengths are drawn up to this)
 * @param childJvmFlags  extra flags of every child JVM (e.g. {@code -XX:TieredStopAtLevel=1} to start faster)
 */
public record SoakOptions(String backend, Duration duration, Duration phase, int inflight, long seed, Path out,
                          Duration requestTimeout, Duration hangGrace, int maxBlocks, List<String> childJvmFlags) {
    /** Validates. */
    public SoakOptions {
        Objects.requireNonNull(backend, "backend");
        Objects.requireNonNull(out, "out");
        childJvmFlags = List.copyOf(childJvmFlags);
        if (duration.isNegative() || duration.isZero() || phase.isNegative() || phase.isZero()) {
            throw new IllegalArgumentException("duration and phase must be positive: " + duration + ", " + phase);
        }
        if (inflight < 1 || maxBlocks < 1) {
            throw new IllegalArgumentException("inflight and maxBlocks must be >= 1: " + inflight + ", " + maxBlocks);
        }
    }

    /** @return how long a request may take from its start before it counts as a hang */
    public Duration hangBound() {
        return requestTimeout.plus(hangGrace);
    }
}
