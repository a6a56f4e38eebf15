package dev.kvtransfer.core.buffer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.LiveResources;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The staging pool of reference §4 (TensorRT-LLM's CacheTransBufferManager): {@code sendSlots} +
 * {@code recvSlots} host buffers of {@code slotBytes} each, allocated up front ({@link MemoryKind#HOST}, or
 * {@link MemoryKind#PINNED_HOST} for a rank whose KV pool is on the device).
 *
 * <ul>
 *   <li>{@link #acquire} takes the lowest free slot of a direction, or waits for one until its deadline
 *       ({@link ErrorCode#TIMEOUT} naming the direction and the wait). Waiters are served first come, first
 *       served: a returned slot is handed straight to the longest waiter, so a stream of fast acquirers cannot
 *       starve a slow one. An interrupted wait fails with {@link ErrorCode#CANCELLED} (interrupt flag kept).
 *       Receives do not wait while dynamic buffers are on: with every receive slot held, the pool grows by one
 *       (allocated then, not pre-touched, kept until the pool closes; {@link #slotCount} counts it).</li>
 *   <li>{@link Slot#carve} cuts the slot into consecutive slices, without padding, while the running total fits;
 *       from the first part that does not fit on, every part gets a dynamic buffer of its size (or, with dynamic
 *       allocation off, the call fails with {@link ErrorCode#INTERNAL} naming the part). {@link Slot#covered()}
 *       is the number of slot slices, as the api defines it — 0 in dynamic-only mode (TensorRT-LLM reports n
 *       there; our dynamic buffers are always full size, so nothing needs chunking either way). A second carve
 *       reuses the slot from offset 0; dynamic buffers of earlier carves stay valid until the slot closes.</li>
 *   <li>{@code slotBytes == 0} is dynamic-only mode (requires {@code allowDynamic}): nothing is pre-allocated,
 *       {@link #acquire} never waits, and the slot counts are ignored.</li>
 *   <li>{@link Slot#close()} frees the slot's dynamic buffers and wakes one waiter. {@link #close()} fails
 *       while slots are held, naming them and their holders.</li>
 * </ul>
 * Thread-safe.
 */
public final class DefaultTransferBufferPool implements TransferBufferPool, AutoCloseable {
    private final BufferManager buffers;
    private final MemoryKind stagingKind;
    private final long slotBytes;
    private final boolean allowDynamic;
    private final ReentrantLock lock = new ReentrantLock();
    private final Map<Direction, SlotSet> sets = new EnumMap<>(Direction.class);
    /** Every slot handed out and not yet closed, dynamic-only ones included. Guarded by {@link #lock}. */
    private final Set<PoolSlot> held = new LinkedHashSet<>();
    private boolean closed;
    /** Told how long each acquire that had to wait waited (granted or not); set once, before use. */
    private volatile java.util.function.ObjLongConsumer<Direction> waitListener;

    /**
     * Allocates the slots.
     *
     * @param buffers      where slots and dynamic buffers come from ({@link MemoryKind#HOST})
     * @param slotBytes    bytes per slot, 0 for dynamic-only mode
     * @param sendSlots    send slots (at least 1 unless dynamic-only)
     * @param recvSlots    receive slots (at least 1 unless dynamic-only)
     * @param allowDynamic whether parts that do not fit get dynamically allocated buffers
     */
    public DefaultTransferBufferPool(BufferManager buffers, long slotBytes, int sendSlots, int recvSlots,
                                     boolean allowDynamic) {
        this(buffers, slotBytes, sendSlots, recvSlots, allowDynamic, MemoryKind.HOST);
    }

    /**
     * Allocates the slots in a given memory kind: {@link MemoryKind#PINNED_HOST} for a rank whose KV pool is on the
     * device ({@link #stagingKindFor}), so that staged parts are gathered / scattered by device copies into memory
     * every transport can send and the copies run at DMA speed.
     *
     * @param buffers      where slots and dynamic buffers come from (must allocate {@code stagingKind})
     * @param slotBytes    bytes per slot, 0 for dynamic-only mode
     * @param sendSlots    send slots (at least 1 unless dynamic-only)
     * @param recvSlots    receive slots (at least 1 unless dynamic-only)
     * @param allowDynamic whether parts that do not fit get dynamically allocated buffers
     * @param stagingKind  {@link MemoryKind#HOST} or {@link MemoryKind#PINNED_HOST} (a transport without
     *                     {@code DEVICE_MEMORY} must be able to send staging)
     */
    public DefaultTransferBufferPool(BufferManager buffers, long slotBytes, int sendSlots, int recvSlots,
                                     boolean allowDynamic, MemoryKind stagingKind) {
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.stagingKind = Objects.requireNonNull(stagingKind, "stagingKind");
        if (stagingKind == MemoryKind.DEVICE) {
            throw new IllegalArgumentException("stagingKind = DEVICE: staging is what transports without "
                    + "DEVICE_MEMORY send, so it must be HOST or PINNED_HOST");
        }
        if (slotBytes < 0) {
            throw new IllegalArgumentException("slotBytes = " + slotBytes + ": must be at least 0");
        }
        if (slotBytes == 0 && !allowDynamic) {
            throw new IllegalArgumentException("slotBytes = 0 (dynamic-only) needs allowDynamic = true");
        }
        if (slotBytes > 0 && (sendSlots < 1 || recvSlots < 1)) {
            throw new IllegalArgumentException("sendSlots = " + sendSlots + ", recvSlots = " + recvSlots
                    + ": each must be at least 1 when slotBytes > 0");
        }
        this.slotBytes = slotBytes;
        this.allowDynamic = allowDynamic;
        int ns = slotBytes == 0 ? 0 : sendSlots;
        int nr = slotBytes == 0 ? 0 : recvSlots;
        List<MemoryBuffer> made = new ArrayList<>();
        try {
            sets.put(Direction.SEND, new SlotSet(Direction.SEND, allocate(ns, made)));
            sets.put(Direction.RECV, new SlotSet(Direction.RECV, allocate(nr, made)));
        } catch (RuntimeException | Error e) {
            made.forEach(MemoryBuffer::close);
            throw e;
        }
        LiveResources.count(1, 1);
    }

    private MemoryBuffer[] allocate(int n, List<MemoryBuffer> made) {
        MemoryBuffer[] out = new MemoryBuffer[n];
        for (int i = 0; i < n; i++) {
            out[i] = buffers.allocate(slotBytes, stagingKind);
            made.add(out[i]);
            // Pre-allocated slots are reused for every transfer: take their page faults now, not in the first.
            MemoryAccess.preTouch(out[i].address(), out[i].size());
        }
        return out;
    }

    @Override
    public long slotBytes() {
        return slotBytes;
    }

    /** @return the memory kind of slots and dynamic buffers */
    public MemoryKind stagingKind() {
        return stagingKind;
    }

    /**
     * The staging kind for a KV pool's memory kind: {@link MemoryKind#PINNED_HOST} for a {@link MemoryKind#DEVICE}
     * pool (device copies into page-locked memory, which every transport sends), else {@link MemoryKind#HOST}.
     *
     * @param poolKind where the rank's KV pool lives
     * @return the kind its staging should have
     */
    public static MemoryKind stagingKindFor(MemoryKind poolKind) {
        return Objects.requireNonNull(poolKind, "poolKind") == MemoryKind.DEVICE ? MemoryKind.PINNED_HOST
                : MemoryKind.HOST;
    }

    /** @return whether parts that do not fit get dynamic buffers */
    public boolean allowsDynamic() {
        return allowDynamic;
    }

    /**
     * @param direction which slots
     * @return pre-allocated slots of that direction (0 in dynamic-only mode)
     */
    public int slotCount(Direction direction) {
        return sets.get(Objects.requireNonNull(direction, "direction")).memory.length;
    }

    /**
     * @param direction which slots
     * @return pre-allocated slots of that direction not held now
     */
    public int freeSlots(Direction direction) {
        lock.lock();
        try {
            SlotSet s = sets.get(Objects.requireNonNull(direction, "direction"));
            int n = 0;
            for (boolean h : s.taken) {
                n += h ? 0 : 1;
            }
            return n;
        } finally {
            lock.unlock();
        }
    }

    /** @return slots handed out and not yet closed (dynamic-only ones included) */
    public int heldSlots() {
        lock.lock();
        try {
            return held.size();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public Slot acquire(Direction direction, Duration timeout) {
        Objects.requireNonNull(direction, "direction");
        Objects.requireNonNull(timeout, "timeout");
        long nanos;
        try {
            nanos = Math.max(0, timeout.toNanos());
        } catch (ArithmeticException e) {
            nanos = Long.MAX_VALUE;
        }
        SlotSet set = sets.get(direction);
        lock.lock();
        try {
            if (closed) {
                throw new IllegalStateException("DefaultTransferBufferPool is closed");
            }
            if (slotBytes == 0) {
                return hand(new PoolSlot(direction, -1, null));
            }
            if (set.waiters.isEmpty()) {
                for (int i = 0; i < set.taken.length; i++) {
                    if (!set.taken[i]) {
                        set.taken[i] = true;
                        return hand(new PoolSlot(direction, i, set.memory[i]));
                    }
                }
                if (direction == Direction.RECV && allowDynamic) {
                    return hand(grow(set));
                }
            }
            Waiter w = new Waiter(lock.newCondition());
            set.waiters.add(w);
            long start = System.nanoTime();
            long left = nanos;
            boolean interrupted = false;
            while (w.granted < 0 && left > 0 && !interrupted) {
                try {
                    left = w.cond.awaitNanos(left);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            long waitedNanos = System.nanoTime() - start;
            java.util.function.ObjLongConsumer<Direction> listener = waitListener;
            if (listener != null) {
                listener.accept(direction, waitedNanos);
            }
            if (w.granted >= 0) {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
                return hand(new PoolSlot(direction, w.granted, set.memory[w.granted]));
            }
            set.waiters.remove(w);
            Duration waited = Duration.ofNanos(waitedNanos);
            if (interrupted) {
                Thread.currentThread().interrupt();
                throw new KvTransferException(ErrorCode.CANCELLED, KvTransferException.NO_REQUEST, "interrupted after "
                        + waited + " waiting for a " + direction + " staging slot", null);
            }
            throw new KvTransferException(ErrorCode.TIMEOUT, "no " + direction + " staging slot freed up within "
                    + timeout + " (waited " + waited + "; all " + set.memory.length + " of " + slotBytes
                    + " B held by " + holders(direction) + ", " + set.waiters.size() + " other waiter(s))");
        } finally {
            lock.unlock();
        }
    }

    /**
     * Sets who is told how long each {@link #acquire} that found no free slot waited (whether it then got one or
     * timed out): the metrics' staging-wait timer. Called under the pool's lock: it must be quick.
     *
     * @param listener receives the direction and the nanoseconds waited
     */
    public void onWait(java.util.function.ObjLongConsumer<Direction> listener) {
        this.waitListener = Objects.requireNonNull(listener, "listener");
    }

    /*
     * A receive never waits for a slot (with dynamic buffers on): a generation rank that waited could hold its only
     * free slot for a request whose senders are busy with another request, the one waiting for that slot (two
     * context ranks serving two pulls in opposite orders; SPEC 3.17), and both would wait out their deadline. The
     * new slot is allocated now, not pre-touched (its pages come as a receive writes them), and kept for later
     * receives until the pool closes. Receives held at once are bounded by the generation request threads.
     */
    private PoolSlot grow(SlotSet set) {
        MemoryBuffer m = buffers.allocate(slotBytes, stagingKind);
        int i = set.memory.length;
        set.memory = java.util.Arrays.copyOf(set.memory, i + 1);
        set.memory[i] = m;
        set.taken = java.util.Arrays.copyOf(set.taken, i + 1);
        set.taken[i] = true;
        return new PoolSlot(set.direction, i, m);
    }

    private PoolSlot hand(PoolSlot s) {
        held.add(s);
        LiveResources.count(2, 1);
        return s;
    }

    private String holders(Direction d) {
        List<String> out = new ArrayList<>();
        for (PoolSlot s : held) {
            if (s.direction == d) {
                out.add(s.describe());
            }
        }
        return out.toString();
    }

    private void release(PoolSlot s) {
        lock.lock();
        try {
            if (held.remove(s)) {
                LiveResources.count(2, -1);
            }
            if (s.index < 0) {
                return;
            }
            SlotSet set = sets.get(s.direction);
            Waiter w = set.waiters.poll();
            if (w != null) {
                w.granted = s.index; // hand over: the slot never becomes free, so no one can jump the queue
                w.cond.signal();
            } else {
                set.taken[s.index] = false;
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Frees the slots.
     *
     * @throws IllegalStateException naming the slots still held; the pool then stays open
     */
    @Override
    public void close() {
        lock.lock();
        try {
            if (closed) {
                return;
            }
            if (!held.isEmpty()) {
                List<String> names = new ArrayList<>();
                for (PoolSlot s : held) {
                    names.add(s.describe());
                }
                throw new IllegalStateException("DefaultTransferBufferPool closed with " + held.size()
                        + " slot(s) still held: " + names);
            }
            closed = true;
            LiveResources.count(1, -1);
            for (SlotSet set : sets.values()) {
                for (MemoryBuffer b : set.memory) {
                    b.close();
                }
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String toString() {
        return "DefaultTransferBufferPool{slotBytes=" + slotBytes + ", kind=" + stagingKind + ", send=" + slotCount(Direction.SEND) + ", recv="
                + slotCount(Direction.RECV) + ", dynamic=" + allowDynamic + ", held=" + heldSlots() + "}";
    }

    private static final class SlotSet {
        final Direction direction;
        /** Guarded by the pool's lock; a receive set grows when every slot is held ({@link #grow}). */
        volatile MemoryBuffer[] memory;
        boolean[] taken;
        final ArrayDeque<Waiter> waiters = new ArrayDeque<>();

        SlotSet(Direction direction, MemoryBuffer[] memory) {
            this.direction = direction;
            this.memory = memory;
            this.taken = new boolean[memory.length];
        }
    }

    private static final class Waiter {
        final Condition cond;
        int granted = -1;

        Waiter(Condition cond) {
            this.cond = cond;
        }
    }

    /** A held slot; owned by one transfer (not thread-safe, except that close is idempotent). */
    private final class PoolSlot implements Slot {
        final Direction direction;
        final int index;
        final MemoryBuffer memory;
        final String holder = Thread.currentThread().getName();
        final Instant since = Instant.now();
        final List<MemoryBuffer> dynamic = new ArrayList<>();
        int covered;
        volatile boolean released;

        PoolSlot(Direction direction, int index, MemoryBuffer memory) {
            this.direction = direction;
            this.index = index;
            this.memory = memory;
        }

        @Override
        public MemoryBuffer[] carve(long[] sizes) {
            Objects.requireNonNull(sizes, "sizes");
            if (released) {
                throw new IllegalStateException(describe() + " is closed");
            }
            for (int i = 0; i < sizes.length; i++) {
                if (sizes[i] < 0) {
                    throw new IllegalArgumentException("sizes[" + i + "] = " + sizes[i] + ": must be at least 0");
                }
            }
            MemoryBuffer[] out = new MemoryBuffer[sizes.length];
            long cap = memory == null ? 0 : memory.size();
            long offset = 0;
            int n = 0;
            if (memory != null) {
                while (n < sizes.length && sizes[n] <= cap - offset) {
                    out[n] = memory.slice(offset, sizes[n]);
                    offset += sizes[n];
                    n++;
                }
            }
            if (n < sizes.length && !allowDynamic) {
                throw new KvTransferException(ErrorCode.INTERNAL, "staging part " + n + " of " + sizes.length + " ("
                        + sizes[n] + " B) does not fit the " + direction + " slot (" + cap + " B, " + (cap - offset)
                        + " B left) and dynamic buffers are off");
            }
            for (int i = n; i < sizes.length; i++) {
                out[i] = buffers.allocate(sizes[i], stagingKind);
                dynamic.add(out[i]);
            }
            covered = n;
            return out;
        }

        @Override
        public int covered() {
            return covered;
        }

        @Override
        public void close() {
            if (released) {
                return;
            }
            released = true;
            try {
                for (MemoryBuffer b : dynamic) {
                    b.close();
                }
                dynamic.clear();
            } finally {
                release(this);
            }
        }

        String describe() {
            return direction + (index < 0 ? " dynamic-only slot" : " slot " + index) + " held by thread '" + holder
                    + "' since " + since;
        }

        @Override
        public String toString() {
            return "Slot{" + describe() + ", covered=" + covered + ", dynamic=" + dynamic.size() + "}";
        }
    }
}
