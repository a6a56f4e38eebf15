package dev.kvtransfer.ucx;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The progress agent's command queue: bounded, many producers, one consumer, no allocation per command (the
 * shape of Agrona's {@code ManyToOneConcurrentArrayQueue}, on {@link VarHandle}s so that users of this backend
 * need no {@code --add-exports} for Agrona's {@code Unsafe}). Producers claim a slot by CAS on the tail and
 * publish the element with a release store; the consumer takes an element only once it is visible.
 */
final class CommandQueue {
    private static final VarHandle TAIL;
    private static final VarHandle HEAD;
    private static final VarHandle SLOTS = MethodHandles.arrayElementVarHandle(UcxCommand[].class);

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            TAIL = l.findVarHandle(CommandQueue.class, "tail", long.class);
            HEAD = l.findVarHandle(CommandQueue.class, "head", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final UcxCommand[] slots;
    private final int mask;
    private final int capacity;
    @SuppressWarnings("unused") // through TAIL
    private volatile long tail;
    @SuppressWarnings("unused") // through HEAD
    private volatile long head;
    private volatile long headCache;

    /**
     * @param capacity a power of two
     */
    CommandQueue(int capacity) {
        if (Integer.bitCount(capacity) != 1) {
            throw new IllegalArgumentException("capacity " + capacity + " is not a power of two");
        }
        this.capacity = capacity;
        this.mask = capacity - 1;
        this.slots = new UcxCommand[capacity];
    }

    /** @return false when full */
    boolean offer(UcxCommand c) {
        long limit = headCache + capacity;
        long t;
        do {
            t = (long) TAIL.getVolatile(this);
            if (t >= limit) {
                long h = (long) HEAD.getVolatile(this);
                limit = h + capacity;
                if (t >= limit) {
                    return false;
                }
                headCache = h;
            }
        } while (!TAIL.compareAndSet(this, t, t + 1));
        SLOTS.setRelease(slots, (int) (t & mask), c);
        return true;
    }

    /** @return the next command, or null (consumer only) */
    UcxCommand poll() {
        long h = (long) HEAD.getOpaque(this);
        int i = (int) (h & mask);
        UcxCommand c = (UcxCommand) SLOTS.getAcquire(slots, i);
        if (c == null) {
            return null; // empty, or a producer claimed the slot and has not published yet
        }
        SLOTS.setOpaque(slots, i, null);
        HEAD.setRelease(this, h + 1);
        return c;
    }

    /** @return whether no command is claimed (a volatile read of both ends) */
    boolean isEmpty() {
        return (long) HEAD.getVolatile(this) == (long) TAIL.getVolatile(this);
    }
}
