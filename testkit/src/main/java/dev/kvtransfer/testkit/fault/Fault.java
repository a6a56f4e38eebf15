package dev.kvtransfer.testkit.fault;

import java.time.Duration;
import java.util.Objects;
import java.util.function.Predicate;

/**
 * One fault to inject: what happens ({@link Kind}), to which messages ({@link #where}), how many times
 * ({@link #times}, {@link #UNLIMITED} for every match) and for how long ({@link #duration}, for delays and
 * stalls).
 *
 * @param kind     what happens to a matching message
 * @param where    which messages (or connects) it applies to
 * @param times    how many matching messages it hits, or {@link #UNLIMITED}
 * @param duration delay of {@link Kind#DELAY}, length of {@link Kind#STALL}; zero otherwise
 * @param corruptAt {@link Kind#CORRUPT}: the byte of the message whose bit 6 flips ({@link #MIDDLE}: the middle
 *                  one; an offset past the end flips the last byte)
 */
public record Fault(Kind kind, Predicate<Message> where, int times, Duration duration, long corruptAt) {
    /** Every matching message. */
    public static final int UNLIMITED = -1;
    /** {@link #corruptAt}: the middle byte of the message. */
    public static final long MIDDLE = -1;

    /** What a fault does. */
    public enum Kind {
        /** The message is not sent; the send returns as if it had been. */
        DROP,
        /** The message is sent twice. */
        DUPLICATE,
        /** The send waits {@code duration} first. */
        DELAY,
        /** The message is held and sent right after the next message of the same connection and tag. */
        REORDER,
        /** One byte of the message (in the middle) is flipped on the wire; the sender's buffer is untouched. */
        CORRUPT,
        /** Only the first half of the message is sent. */
        TRUNCATE,
        /** The sender's manager is closed while the message is being sent (a process dying mid-message). */
        DISCONNECT,
        /** Every send of the manager waits until {@code duration} after the first match (a stopped process). */
        STALL,
        /** {@code connection(address)} to a matching peer fails with {@code NETWORK}. */
        REFUSE_CONNECT
    }

    /**
     * A message (or connect) as faults see it.
     *
     * @param from   the sending manager's address
     * @param to     the receiving peer's address
     * @param tag    the message tag (0 for a connect)
     * @param length payload bytes
     */
    public record Message(String from, String to, int tag, long length) {
    }

    /**
     * Validates.
     *
     * @param kind     kind
     * @param where    predicate
     * @param times    count or UNLIMITED
     * @param duration delay / stall length
     * @param corruptAt the corrupted byte, or MIDDLE
     */
    public Fault {
        if (corruptAt < MIDDLE) {
            throw new IllegalArgumentException("corruptAt = " + corruptAt + ": a byte offset, or MIDDLE");
        }
        Objects.requireNonNull(kind, "kind");
        Objects.requireNonNull(where, "where");
        Objects.requireNonNull(duration, "duration");
        if (times < 1 && times != UNLIMITED) {
            throw new IllegalArgumentException("times = " + times + ": at least 1, or UNLIMITED");
        }
    }

    /**
     * A fault whose corruption (if any) is in the middle of the message.
     *
     * @param kind     kind
     * @param where    predicate
     * @param times    count or UNLIMITED
     * @param duration delay / stall length
     */
    public Fault(Kind kind, Predicate<Message> where, int times, Duration duration) {
        this(kind, where, times, duration, MIDDLE);
    }

    /**
     * @param where  which message
     * @param offset the byte whose bit 6 flips (past the end: the last byte)
     * @return a fault corrupting one bit of the first matching message, at {@code offset}
     */
    public static Fault corruptAt(Predicate<Message> where, long offset) {
        return new Fault(Kind.CORRUPT, where, 1, Duration.ZERO, offset);
    }

    /**
     * @param kind  what happens
     * @param where which messages
     * @return a fault that hits the first matching message once
     */
    public static Fault once(Kind kind, Predicate<Message> where) {
        return new Fault(kind, where, 1, Duration.ZERO);
    }

    /**
     * @param delay how long each matching send waits
     * @param where which messages
     * @return a fault delaying every matching send
     */
    public static Fault delay(Duration delay, Predicate<Message> where) {
        return new Fault(Kind.DELAY, where, UNLIMITED, delay);
    }

    /**
     * @param length how long the manager stays stopped from the first match
     * @param where  which message starts the stall
     * @return a stall fault
     */
    public static Fault stall(Duration length, Predicate<Message> where) {
        return new Fault(Kind.STALL, where, 1, length);
    }

    /**
     * Messages on payload tags (at least {@code dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG}) of at least
     * {@code minBytes} bytes: the parts of a transfer rather than its control messages.
     *
     * @param minBytes smallest length matched
     * @return the predicate
     */
    public static Predicate<Message> dataOfAtLeast(long minBytes) {
        return m -> m.tag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG && m.length() >= minBytes;
    }

    /**
     * The request infos a faulty <em>generation</em> side sends: each travels on its request's data tag (named by
     * its header), and a generation rank sends nothing else on data tags.
     *
     * @return the predicate (meant for a generation instance's transport)
     */
    public static Predicate<Message> requestInfos() {
        return m -> m.tag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG;
    }

    /**
     * @param tag a tag
     * @return messages of that tag
     */
    public static Predicate<Message> tag(int tag) {
        return m -> m.tag() == tag;
    }
}
