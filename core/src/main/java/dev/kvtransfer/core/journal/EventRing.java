package dev.kvtransfer.core.journal;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A bounded many-producer, one-consumer ring of pre-allocated, reused event slots (Vyukov's bounded queue):
 * producers claim a slot with one CAS and publish it with a release store of its sequence; the consumer reads
 * slots in order. Nothing is allocated after construction and producers never wait: a full ring makes
 * {@link #claim()} return null (the journal counts the event as lost).
 */
final class EventRing {
    /** One event, written by a producer between {@link #claim()} and {@link #publish(Slot)}. */
    static final class Slot {
        private static final VarHandle SEQ;

        static {
            try {
                SEQ = MethodHandles.lookup().findVarHandle(Slot.class, "sequence", long.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        @SuppressWarnings("unused") // accessed through SEQ
        private long sequence;
        private long claimed;
        RecordType type;
        TransferJournal.Role role;
        long requestId;
        int peerRank;
        long a;
        long b;
        long c;
        long monoNanos;
        Object ref;

        Slot(long sequence) {
            SEQ.setRelease(this, sequence);
        }

        long sequenceAcquire() {
            return (long) SEQ.getAcquire(this);
        }

        void sequenceRelease(long v) {
            SEQ.setRelease(this, v);
        }
    }

    private final Slot[] slots;
    private final int mask;
    private final AtomicLong tail = new AtomicLong();
    private long head;

    EventRing(int capacity) {
        if (capacity < 2 || Integer.bitCount(capacity) != 1) {
            throw new IllegalArgumentException("ring capacity " + capacity + ": must be a power of two >= 2");
        }
        slots = new Slot[capacity];
        for (int i = 0; i < capacity; i++) {
            slots[i] = new Slot(i);
        }
        mask = capacity - 1;
    }

    /** @return a slot to fill and {@link #publish}, or null when the ring is full */
    Slot claim() {
        long pos = tail.get();
        for (;;) {
            Slot s = slots[(int) (pos & mask)];
            long dif = s.sequenceAcquire() - pos;
            if (dif == 0) {
                if (tail.compareAndSet(pos, pos + 1)) {
                    s.claimed = pos;
                    return s;
                }
                pos = tail.get();
            } else if (dif < 0) {
                return null;
            } else {
                pos = tail.get();
            }
        }
    }

    /** Makes a claimed slot visible to the consumer. */
    void publish(Slot s) {
        s.sequenceRelease(s.claimed + 1);
    }

    /** Consumer only: @return the next published slot, or null; hand it back with {@link #release}. */
    Slot peek() {
        Slot s = slots[(int) (head & mask)];
        return s.sequenceAcquire() == head + 1 ? s : null;
    }

    /** Consumer only: frees the slot returned by {@link #peek()} for reuse. */
    void release(Slot s) {
        s.ref = null;
        s.sequenceRelease(head + slots.length);
        head++;
    }

    /** @return slots claimed so far (published or being filled) */
    long claimedCount() {
        return tail.get();
    }

    int capacity() {
        return slots.length;
    }
}
