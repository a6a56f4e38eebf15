package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;

import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Collection;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The memory one endpoint has registered for peers' one-sided writes, and the owner-side check of every write entry
 * against it: {@link EmulatedOneSided} (the owner receives the bytes) and a native one-sided transport that guards
 * its puts with an owner-side grant (MPI) share it, so both issue ids and keys alike and refuse alike.
 *
 * <p>Keys are {@value #KEY_BYTES} random bytes from {@link SecureRandom}, compared in constant time. Region ids only
 * grow, so a known-but-deregistered id ({@code CANCELLED}) is told apart from one never issued
 * ({@code UNAUTHORIZED}). Each registration counts the batches granted into it; {@link Registration#revoke} refuses
 * new ones at once and waits, up to a deadline, until none is in flight. Thread-safe.
 */
public final class RegionRegistry {
    /** Key length. */
    public static final int KEY_BYTES = 16;

    private final SecureRandom random = new SecureRandom();
    private final AtomicLong nextRegionId = new AtomicLong(1);
    private final Map<Long, Registration> regions = new ConcurrentHashMap<>();

    /** An empty registry. */
    public RegionRegistry() {
    }

    /**
     * Issues a new id and key for {@code memory}, not yet visible to {@link #acquire} (a transport may still fail to
     * expose the memory; the id is spent either way).
     *
     * @param owner   the owner's address, for the descriptor
     * @param memory  the memory
     * @param writers the peers allowed to write, or null for any holder of the descriptor
     * @return the registration, to {@link #publish}
     */
    public Registration issue(String owner, MemoryBuffer memory, Set<String> writers) {
        Objects.requireNonNull(owner, "owner");
        Objects.requireNonNull(memory, "memory");
        byte[] key = new byte[KEY_BYTES];
        random.nextBytes(key);
        long id = nextRegionId.getAndIncrement();
        return new Registration(id, memory, key, new RegionDescriptor(owner, id, memory.address(), memory.size(), key),
                writers == null ? null : Set.copyOf(writers));
    }

    /**
     * Makes a registration visible to writers.
     *
     * @param registration from {@link #issue}
     * @param handle       what the transport handed out for it ({@link Registration#handle()})
     */
    public void publish(Registration registration, RegisteredRegion handle) {
        Objects.requireNonNull(registration, "registration");
        registration.handle = Objects.requireNonNull(handle, "handle");
        regions.put(registration.id, registration);
    }

    /** @return regions registered now */
    public int size() {
        return regions.size();
    }

    /** @return the registrations now (a live view: revoking one while iterating is allowed) */
    public Collection<Registration> registrations() {
        return regions.values();
    }

    /**
     * Checks one write entry against the registrations and, when it may write, counts it in flight on its region
     * (the caller {@link Registration#release}s it when the entry's bytes are placed or the batch fails).
     *
     * @param id             the region id the entry names
     * @param key            the key it presents ({@value #KEY_BYTES} bytes)
     * @param writer         the writing peer, or null where the transport cannot tell (only regions registered
     *                       without writers can then be written)
     * @param claimedAddress the region's address as the writer's descriptor claims it
     * @param offset         first byte written, in the region
     * @param length         bytes written
     * @return the region, acquired
     * @throws Refusal when the entry may not write: what and why, the first failing check in the order unknown or
     *                 deregistered id, key, writer, address, bounds, revoked
     */
    public Registration acquire(long id, byte[] key, String writer, long claimedAddress, long offset, long length)
            throws Refusal {
        Registration r = regions.get(id);
        if (r == null) {
            boolean issued = id > 0 && id < nextRegionId.get();
            throw new Refusal(issued ? ErrorCode.CANCELLED : ErrorCode.UNAUTHORIZED,
                    issued ? "region #" + id + " was deregistered" : "no region #" + id + " here");
        }
        if (!MessageDigest.isEqual(key, r.key)) {
            throw new Refusal(ErrorCode.UNAUTHORIZED, "wrong key for region #" + id);
        }
        if (r.writers != null && (writer == null || !r.writers.contains(writer))) {
            throw new Refusal(ErrorCode.UNAUTHORIZED, "region #" + id + " is granted to other peers, not to " + writer);
        }
        if (claimedAddress != r.memory.address()) {
            throw new Refusal(ErrorCode.UNAUTHORIZED, "region #" + id + " is not at the address its descriptor claims");
        }
        if (!r.descriptor.contains(offset, length)) {
            throw new Refusal(ErrorCode.MALFORMED, length + " bytes at offset " + offset + " leave region #" + id
                    + " of " + r.memory.size() + " bytes");
        }
        if (!r.acquire()) {
            throw new Refusal(ErrorCode.CANCELLED, "region #" + id + " was deregistered");
        }
        return r;
    }

    /** Why a write entry may not write: an error code and a reason for the writer. No stack trace. */
    public static final class Refusal extends Exception {
        private static final long serialVersionUID = 1L;
        private final transient ErrorCode code;

        Refusal(ErrorCode code, String reason) {
            super(reason, null, false, false);
            this.code = code;
        }

        /** @return the code the writer's call fails with */
        public ErrorCode code() {
            return code;
        }

        /** @return the reason, without the code */
        public String reason() {
            return getMessage();
        }
    }

    /** One registration: its memory, key and descriptor, and the batches granted into it now. */
    public final class Registration {
        private final long id;
        private final MemoryBuffer memory;
        private final byte[] key;
        private final RegionDescriptor descriptor;
        /** The peers allowed to write, or null for any holder of the descriptor. */
        private final Set<String> writers;
        private volatile RegisteredRegion handle;
        private int inFlight;
        private boolean revoked;
        private boolean drained;

        private Registration(long id, MemoryBuffer memory, byte[] key, RegionDescriptor descriptor,
                             Set<String> writers) {
            this.id = id;
            this.memory = memory;
            this.key = key;
            this.descriptor = descriptor;
            this.writers = writers;
        }

        /** @return the region id */
        public long id() {
            return id;
        }

        /** @return the registered memory */
        public MemoryBuffer memory() {
            return memory;
        }

        /** @return what a writer needs to write into it */
        public RegionDescriptor descriptor() {
            return descriptor;
        }

        /** @return what the transport handed out for it (given to {@link #publish}) */
        public RegisteredRegion handle() {
            return handle;
        }

        synchronized boolean acquire() {
            if (revoked) {
                return false;
            }
            inFlight++;
            return true;
        }

        /** One batch granted by {@link RegionRegistry#acquire} is done with this region. */
        public synchronized void release() {
            inFlight--;
            if (inFlight == 0) {
                notifyAll();
            }
        }

        /**
         * Deregisters: refuses new batches at once ({@code CANCELLED}), then waits until no granted batch writes
         * into the region or the deadline passes. Restores the caller's interrupt flag after waiting.
         *
         * @param deadlineNanos a {@link System#nanoTime()} value
         * @param once          true to return -1 at once when an earlier revoke has already finished waiting
         * @return the batches still in flight (0: none, nothing more can be written), or -1 (see {@code once})
         */
        public int revoke(long deadlineNanos, boolean once) {
            regions.remove(id);
            synchronized (this) {
                if (once && drained) {
                    return -1;
                }
                revoked = true;
                boolean interrupted = false;
                while (inFlight > 0) {
                    long left = deadlineNanos - System.nanoTime();
                    if (left <= 0) {
                        break;
                    }
                    try {
                        TimeUnit.NANOSECONDS.timedWait(this, left);
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
                drained = true;
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
                return inFlight;
            }
        }

        @Override
        public String toString() {
            return descriptor.toString();
        }
    }
}
