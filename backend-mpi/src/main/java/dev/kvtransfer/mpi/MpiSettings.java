package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ConfigKey;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.Set;

/**
 * Every {@code mpi.*} transport property of one manager, parsed and validated once at {@code create} (Aeron
 * {@code Context.conclude()} style): an unknown {@code mpi.} key or a value out of range fails there, naming the
 * key, the value and the known keys. Immutable.
 *
 * <table>
 *   <caption>properties</caption>
 *   <tr><th>key</th><th>default</th><th>meaning</th></tr>
 *   <tr><td>{@value #MAX_MESSAGE_BYTES}</td><td>1 GiB</td><td>chunk size {@code C} of payloads: a message
 *       of {@code n} bytes travels as {@code ceil(n / C)} MPI messages (MPI counts are {@code int}); carried in
 *       each envelope, so ranks may differ</td></tr>
 *   <tr><td>{@value #EAGER_BYTES}</td><td>64 KiB</td><td>messages of at most this many bytes travel inline
 *       in their envelope, copied, and {@code send} returns before the peer receives; at least
 *       {@link Connection#EAGER_LIMIT} (the contract), at most 16 MiB</td></tr>
 *   <tr><td>{@value #MAX_QUEUED_BYTES}</td><td>256 MiB</td><td>inline payload bytes an endpoint holds for
 *       receives not posted yet; beyond it further messages are dropped and reported</td></tr>
 *   <tr><td>{@value #MAX_QUEUED_MESSAGES}</td><td>1,000,000</td><td>the same bound in messages (zero-length
 *       ones count)</td></tr>
 *   <tr><td>{@value #ONE_SIDED}</td><td>{@code native}</td><td>one-sided writes: {@code native} (MPI-3 RMA,
 *       {@code osc rdma}) or {@code emulated} (two-sided, {@code EmulatedOneSided}); the provider's declared
 *       capabilities follow the default</td></tr>
 * </table>
 */
final class MpiSettings {
    /** Prefix of every key. */
    static final String PREFIX = "mpi.";
    /** Chunk size of payloads. */
    static final String MAX_MESSAGE_BYTES = "mpi.maxMessageBytes";
    /** Inline (eager) limit. */
    static final String EAGER_BYTES = "mpi.eagerBytes";
    /** Bound on queued inline bytes per endpoint. */
    static final String MAX_QUEUED_BYTES = "mpi.maxQueuedBytes";
    /** Bound on queued messages per endpoint. */
    static final String MAX_QUEUED_MESSAGES = "mpi.maxQueuedMessages";
    /** One-sided write implementation. */
    static final String ONE_SIDED = "mpi.oneSided";
    /** Every known key. */
    static final Set<String> KNOWN = Set.of(MAX_MESSAGE_BYTES, EAGER_BYTES, MAX_QUEUED_BYTES, MAX_QUEUED_MESSAGES,
            ONE_SIDED);

    static final long DEFAULT_MAX_MESSAGE_BYTES = 1L << 30;
    static final long DEFAULT_EAGER_BYTES = Connection.EAGER_LIMIT;
    /** Largest inline message: also what the progress agent accepts as one envelope. */
    static final long MAX_EAGER_BYTES = 16L << 20;
    static final long DEFAULT_MAX_QUEUED_BYTES = 256L << 20;
    static final long DEFAULT_MAX_QUEUED_MESSAGES = 1_000_000;

    /** Every key with its default, accepted values and meaning: the source of {@code docs/configuration.md}. */
    static final List<ConfigKey> CONFIG_KEYS = List.of(
            new ConfigKey(MAX_MESSAGE_BYTES, Long.toString(DEFAULT_MAX_MESSAGE_BYTES), "[1, 2147483647] bytes",
                    "Chunk size C of payloads: a message of n bytes travels as ceil(n / C) MPI messages (MPI counts "
                            + "are int); carried in each envelope, so ranks may differ."),
            new ConfigKey(EAGER_BYTES, Long.toString(DEFAULT_EAGER_BYTES),
                    "[" + Connection.EAGER_LIMIT + ", " + MAX_EAGER_BYTES + "] bytes",
                    "Messages of at most this many bytes travel inline in their envelope, copied; send returns "
                            + "before the peer receives."),
            new ConfigKey(MAX_QUEUED_BYTES, Long.toString(DEFAULT_MAX_QUEUED_BYTES), "[1048576, 2^40] bytes",
                    "Inline payload bytes an endpoint holds for receives not posted yet; beyond it further messages "
                            + "are dropped and reported."),
            new ConfigKey(MAX_QUEUED_MESSAGES, Long.toString(DEFAULT_MAX_QUEUED_MESSAGES), "[16, 2^30]",
                    "The same bound in messages (zero-length ones count)."),
            new ConfigKey(ONE_SIDED, "native", "native | emulated",
                    "One-sided writes (push): MPI-3 RMA, or two-sided messages placed by the owner's receive."));

    /** How one-sided writes are done. */
    enum OneSided {
        /** MPI-3 RMA on the process's dynamic window. */
        NATIVE,
        /** Two-sided messages placed by the owner's receive ({@code EmulatedOneSided}). */
        EMULATED
    }

    private final String name;
    private final Duration defaultTimeout;
    private final int chunkBytes;
    private final int eagerBytes;
    private final long maxQueuedBytes;
    private final long maxQueuedMessages;
    private final OneSided oneSided;

    private MpiSettings(TransportConfig config) {
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.chunkBytes = (int) range(config, MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES, 1, Integer.MAX_VALUE);
        this.eagerBytes = (int) range(config, EAGER_BYTES, DEFAULT_EAGER_BYTES, Connection.EAGER_LIMIT,
                MAX_EAGER_BYTES);
        this.maxQueuedBytes = range(config, MAX_QUEUED_BYTES, DEFAULT_MAX_QUEUED_BYTES, 1L << 20, 1L << 40);
        this.maxQueuedMessages = range(config, MAX_QUEUED_MESSAGES, DEFAULT_MAX_QUEUED_MESSAGES, 16, 1L << 30);
        String os = config.property(ONE_SIDED, "native").trim().toLowerCase(Locale.ROOT);
        this.oneSided = switch (os) {
            case "native" -> OneSided.NATIVE;
            case "emulated" -> OneSided.EMULATED;
            default -> throw new IllegalArgumentException("transport property " + ONE_SIDED + " = '"
                    + config.property(ONE_SIDED, "") + "': must be native or emulated");
        };
    }

    /**
     * Parses and validates the properties of a config.
     *
     * @param config the manager's configuration
     * @return the settings
     * @throws IllegalArgumentException naming the key: unknown {@code mpi.} key, not a number, out of range
     */
    static MpiSettings conclude(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        config.checkKnownProperties(PREFIX, KNOWN);
        return new MpiSettings(config);
    }

    private static long range(TransportConfig config, String key, long dflt, long min, long max) {
        long v = config.longProperty(key, dflt);
        if (v < min || v > max) {
            throw new IllegalArgumentException("transport property " + key + " = " + v + ": must be in [" + min
                    + ", " + max + "]");
        }
        return v;
    }

    String name() {
        return name;
    }

    Duration defaultTimeout() {
        return defaultTimeout;
    }

    int chunkBytes() {
        return chunkBytes;
    }

    int eagerBytes() {
        return eagerBytes;
    }

    long maxQueuedBytes() {
        return maxQueuedBytes;
    }

    long maxQueuedMessages() {
        return maxQueuedMessages;
    }

    OneSided oneSided() {
        return oneSided;
    }

    @Override
    public String toString() {
        return "MpiSettings{" + name + ", chunk " + chunkBytes + " B, eager " + eagerBytes + " B, queue "
                + maxQueuedBytes + " B / " + maxQueuedMessages + " messages, one-sided " + oneSided + "}";
    }
}
