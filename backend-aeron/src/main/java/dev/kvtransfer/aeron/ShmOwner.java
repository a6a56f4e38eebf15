package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.SharedMappings;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The owner side of one-copy writes between processes of one host: for a registration whose memory lies in a
 * shared pool file ({@link SharedMappings}), it hands the file, the grant's place in it and a revocation slot of
 * its {@link ShmFence} to a writer that asks over its connection, but only when this manager authenticates every
 * peer (a deployment secret), the writer holds the grant's key and is one of its writers. The registration's
 * descriptor carries a longer key ({@link #KEY_BYTES}: the emulated key, then a marker) so that a writer knows
 * the owner answers; everything else stays with the emulated registration it wraps, which still serves writers of
 * another host.
 *
 * <p>A grant bound to its writers (a push grant) also carries, in its key, the pool file's id and the grant's place
 * in it and a slot for each writer ({@link #KEY_HEADER}, {@link #WRITER_ENTRY}): a writer that already mapped this
 * owner's fence and that file through an earlier exchange writes at once, without a round trip per request (which
 * cost a 1 MiB request about a fifth of its time). The key travels in the request info, which only the grant's
 * writers get, over authenticated connections, MAC'd; a writer without those mappings asks as before.
 *
 * <p>Closing a grant revokes its slots and returns once no writer copies under them (or the writer process is
 * gone), bounded by the operation timeout, and then closes the emulated registration.
 */
final class ShmOwner implements AutoCloseable {
    static final int MAP_REQUEST_TAG = 64;
    static final int MAP_REPLY_TAG = 65;
    static final int REQUEST_BYTES = 64;
    static final int REPLY_BYTES = 512;
    static final int MAGIC = 0x314d4853; // "SHM1"
    static final int KEY_BYTES = 32;
    /**
     * A key with slots handed out with the grant: {@link #KEY_BYTES} (emulated key, marker), then at 20 the file id,
     * at 24 the grant's offset in the file, at 32 the number of writer entries, then the entries.
     */
    static final int KEY_HEADER = 40;
    /** One writer's entry: the first 8 bytes of SHA-256 of its address, its slot, the slot's generation. */
    static final int WRITER_ENTRY = 16;
    /** Most writers a grant hands slots to in its key; a grant with more writers leaves them to the exchange. */
    static final int MAX_KEY_WRITERS = 64;
    /** Where a reply carries the pool file's id. */
    static final int FILE_ID_AT = 56;
    static final int OK = 0;
    static final int NOT_SHARED = 1;
    static final int REFUSED = 2;
    static final int PATH_AT = 64;
    static final int FENCE_PATH_AT = 288;
    static final int MAX_TEXT = 220;
    private static final Duration POLL = Duration.ofMillis(100);
    /** This process's pid namespace: a writer's pid tells whether it runs only when both are in the same one. */
    static final long PID_NAMESPACE = pidNamespace();

    /** Grants handed to writers by every owner of this process (tests read it). */
    private static final java.util.concurrent.atomic.AtomicLong GRANTED = new java.util.concurrent.atomic.AtomicLong();
    private final ConnectionManager manager;
    private final boolean authenticated;
    private final ErrorHandler errors;
    private final Duration opTimeout;
    private final String name;
    private final Map<Long, Region> regions = new ConcurrentHashMap<>();
    /** Pool files by path: the id a key names them by. */
    private final Map<String, Integer> fileIds = new ConcurrentHashMap<>();
    private final java.util.concurrent.atomic.AtomicInteger nextFileId = new java.util.concurrent.atomic.AtomicInteger();
    private final Object lifecycle = new Object();
    private ShmFence fence;
    private Thread poller;
    private boolean unavailable;
    private volatile boolean closed;

    ShmOwner(ConnectionManager manager, boolean authenticated, ErrorHandler errors, Duration opTimeout, String name) {
        this.manager = manager;
        this.authenticated = authenticated;
        this.errors = errors;
        this.opTimeout = opTimeout;
        this.name = name;
    }

    /**
     * Wraps a fresh emulated registration when its memory is shared and writers may be handed it.
     *
     * @param inner   the emulated registration
     * @param memory  its memory
     * @param writers the writers it is bound to, or null
     * @return a shared registration, or {@code inner}
     */
    RegisteredRegion wrap(RegisteredRegion inner, MemoryBuffer memory, Set<String> writers) {
        if (!authenticated || memory.size() == 0) {
            return inner;
        }
        SharedMappings.Mapping m = SharedMappings.find(memory.address(), memory.size());
        if (m == null || !start()) {
            return inner;
        }
        Region r = new Region(inner, memory.address(), m.file(), m.fileOffset() + (memory.address() - m.address()),
                memory.size(), writers);
        regions.put(inner.descriptor().regionId(), r);
        return r;
    }

    /** @return grants handed to writers by the owners of this process so far */
    static long granted() {
        return GRANTED.get();
    }

    /** @return regions currently shared */
    int sharedRegions() {
        return regions.size();
    }

    private boolean start() {
        synchronized (lifecycle) {
            if (closed || unavailable) {
                return false;
            }
            if (fence == null) {
                try {
                    fence = ShmFence.create();
                } catch (IOException | RuntimeException e) {
                    unavailable = true;
                    errors.onError(new TransportException(ErrorCode.INTERNAL, name + ": no one-copy writes on this "
                            + "host (cannot create a fence file in /dev/shm: " + e + "); writes stay emulated", e));
                    return false;
                }
                poller = new Thread(this::poll, name + "-shm-grants");
                poller.setDaemon(true);
                poller.start();
            }
            return true;
        }
    }

    private void poll() {
        try (OffHeapBuffer req = OffHeapBuffer.allocate(REQUEST_BYTES);
             OffHeapBuffer rep = OffHeapBuffer.allocate(REPLY_BYTES)) {
            ByteBuffer q = req.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            ByteBuffer a = rep.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            while (!closed) {
                Connection c;
                try {
                    c = manager.pollConnect(MAP_REQUEST_TAG, req, 0, REQUEST_BYTES, POLL);
                } catch (TransportClosedException e) {
                    return;
                } catch (TransportException e) {
                    errors.onError(e);
                    continue;
                }
                if (c != null) {
                    serve(c, q, a, rep);
                }
            }
        } catch (RuntimeException e) {
            errors.onError(new TransportException(ErrorCode.INTERNAL, name + ": shared-memory grant agent stopped: "
                    + e, e));
        }
    }

    private void serve(Connection c, ByteBuffer q, ByteBuffer a, OffHeapBuffer rep) {
        long requestId = q.getLong(8);
        long regionId = q.getLong(16);
        byte[] key = new byte[16];
        q.get(24, key);
        long pid = q.getLong(40);
        long claimedAddress = q.getLong(48);
        long pidNamespace = q.getLong(56);
        for (int i = 0; i < REPLY_BYTES; i += 8) {
            a.putLong(i, 0);
        }
        a.putLong(0, requestId);
        Region r = q.getInt(0) == MAGIC ? regions.get(regionId) : null;
        int status;
        String text;
        if (q.getInt(0) != MAGIC) {
            status = REFUSED + ErrorCode.MALFORMED.ordinal();
            text = "not a shared-memory map request";
        } else if (r == null) {
            status = NOT_SHARED;
            text = "region #" + regionId + " is not shared here";
        } else if (!MessageDigest.isEqual(key, Arrays.copyOf(r.descriptor.key(), 16))) {
            status = REFUSED + ErrorCode.UNAUTHORIZED.ordinal();
            text = "wrong key for region #" + regionId;
        } else if (r.writers != null && !r.writers.contains(c.peer())) {
            status = REFUSED + ErrorCode.UNAUTHORIZED.ordinal();
            text = "region #" + regionId + " is granted to other peers, not to " + c.peer();
        } else if (claimedAddress != r.address) {
            status = REFUSED + ErrorCode.UNAUTHORIZED.ordinal();
            text = "region #" + regionId + " is not at the address its descriptor claims";
        } else {
            int slot = r.grant(pid, pidNamespace);
            if (slot == -2) {
                status = REFUSED + ErrorCode.CANCELLED.ordinal();
                text = "region #" + regionId + " was deregistered";
            } else if (slot == -1) {
                status = NOT_SHARED;
                text = "no free revocation slot";
            } else {
                status = OK;
                GRANTED.incrementAndGet();
                text = r.file;
                a.putInt(12, slot);
                a.putInt(16, fence.generation(slot));
                a.putLong(24, r.fileOffset);
                a.putLong(32, r.length);
                a.put(40, fence.token);
                a.putInt(FILE_ID_AT, r.fileId);
                putText(a, FENCE_PATH_AT, fence.path.toString());
            }
        }
        a.putInt(8, status);
        putText(a, PATH_AT, text);
        if (status >= REFUSED) {
            errors.onError(new TransportException(ErrorCode.values()[status - REFUSED], name + ": refused a "
                    + "shared-memory grant to " + c.peer() + ": " + text));
        }
        try {
            c.send(MAP_REPLY_TAG, rep, 0, REPLY_BYTES, opTimeout);
        } catch (TransportClosedException e) {
            // closing
        } catch (RuntimeException e) {
            errors.onError(new TransportException(e instanceof TransportException t ? t.code() : ErrorCode.NETWORK,
                    name + ": answering a shared-memory grant request of " + c.peer() + " failed: " + e, e));
        }
    }

    /** Writer tags by address: the same few writers ask for every request's grants. */
    private static final Map<String, Long> TAGS = new ConcurrentHashMap<>();

    /** @return the first 8 bytes of SHA-256 of a writer's address: its entry's name in a key */
    static long writerTag(String address) {
        Long t = TAGS.get(address);
        if (t != null) {
            return t;
        }
        if (TAGS.size() >= 4096) {
            TAGS.clear(); // addresses of restarted peers: bounded, recomputed when asked again
        }
        long tag = sha256Tag(address);
        TAGS.put(address, tag);
        return tag;
    }

    private static long sha256Tag(String address) {
        try {
            byte[] h = MessageDigest.getInstance("SHA-256").digest(address.getBytes(StandardCharsets.UTF_8));
            return ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    private static void putText(ByteBuffer a, int at, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(b.length, MAX_TEXT);
        a.putShort(at, (short) n);
        a.put(at + 2, b, 0, n);
    }

    static String text(ByteBuffer a, int at) {
        int n = Math.min(a.getShort(at) & 0xffff, MAX_TEXT);
        byte[] b = new byte[n];
        a.get(at + 2, b);
        return new String(b, StandardCharsets.UTF_8);
    }

    private static long pidNamespace() {
        try {
            String s = Files.readSymbolicLink(Path.of("/proc/self/ns/pid")).toString();
            return Long.parseLong(s.replaceAll("[^0-9]", ""));
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }

    /** Whether a writer process is certainly gone: same pid namespace and no such live process. */
    private static boolean gone(long pid, long pidNamespace) {
        return pidNamespace != -1 && pidNamespace == PID_NAMESPACE
                && ProcessHandle.of(pid).map(p -> !p.isAlive()).orElse(true);
    }

    /** Revokes every grant and stops the agent (bounded). Idempotent. */
    @Override
    public void close() {
        Thread p;
        synchronized (lifecycle) {
            if (closed) {
                return;
            }
            closed = true;
            p = poller;
        }
        for (Region r : new ArrayList<>(regions.values())) {
            r.revoke();
        }
        if (p != null) {
            try {
                p.join(POLL.toMillis() * 20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        synchronized (lifecycle) {
            if (fence != null) {
                fence.close();
            }
        }
    }

    /** A registration writers of this host may reach through the pool file. */
    private final class Region implements RegisteredRegion {
        final RegisteredRegion inner;
        final RegionDescriptor descriptor;
        final long address;
        final String file;
        final long fileOffset;
        final long length;
        final Set<String> writers;
        final int fileId;
        /** Slots handed out: {slot, pid, pid namespace}; pid 0 for a slot in the key (its writer claims it). */
        private final List<long[]> grants = new ArrayList<>();
        private boolean revoked;

        Region(RegisteredRegion inner, long address, String file, long fileOffset, long length, Set<String> writers) {
            this.inner = inner;
            this.fileId = fileIds.computeIfAbsent(file, f -> nextFileId.incrementAndGet());
            RegionDescriptor d = inner.descriptor();
            int n = writers == null || writers.size() > MAX_KEY_WRITERS ? 0 : writers.size();
            byte[] key = Arrays.copyOf(d.key(), n == 0 ? KEY_BYTES : KEY_HEADER + n * WRITER_ENTRY);
            ByteBuffer k = ByteBuffer.wrap(key).order(ByteOrder.LITTLE_ENDIAN);
            k.putInt(16, MAGIC);
            if (n > 0) {
                k.putInt(20, fileId);
                k.putLong(24, fileOffset);
                int at = KEY_HEADER;
                for (String w : writers) {
                    int slot = fence.allocate();
                    if (slot >= 0) {
                        grants.add(new long[] {slot, 0, -1});
                    }
                    k.putLong(at, writerTag(w));
                    k.putInt(at + 8, slot); // -1: none free, the writer asks
                    k.putInt(at + 12, slot >= 0 ? fence.generation(slot) : 0);
                    at += WRITER_ENTRY;
                }
                k.putInt(32, n);
            }
            this.descriptor = new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(), key);
            this.address = address;
            this.file = file;
            this.fileOffset = fileOffset;
            this.length = length;
            this.writers = writers;
        }

        synchronized int grant(long pid, long pidNamespace) {
            if (revoked) {
                return -2;
            }
            int slot = fence.allocate();
            if (slot >= 0) {
                grants.add(new long[] {slot, pid, pidNamespace});
            }
            return slot;
        }

        @Override
        public RegionDescriptor descriptor() {
            return descriptor;
        }

        @Override
        public MemoryBuffer memory() {
            return inner.memory();
        }

        /** Revokes the slots and waits until nothing copies under them; bounded by the operation timeout. */
        void revoke() {
            regions.remove(descriptor.regionId(), this);
            List<long[]> g;
            synchronized (this) {
                if (revoked) {
                    return;
                }
                revoked = true;
                g = new ArrayList<>(grants);
            }
            for (long[] e : g) {
                fence.revoke((int) e[0]);
            }
            long deadline = System.nanoTime() + opTimeout.toNanos();
            for (long[] e : g) {
                int slot = (int) e[0];
                boolean free = true;
                while (fence.inFlight(slot) > 0) {
                    // A slot of the key: its writer wrote its pid into the fence before its first piece.
                    long pid = e[1] != 0 ? e[1] : fence.writerPid(slot);
                    long ns = e[1] != 0 ? e[2] : fence.writerPidNamespace(slot);
                    if (pid != 0 && gone(pid, ns)) {
                        break;
                    }
                    if (System.nanoTime() - deadline > 0) {
                        free = false;
                        errors.onError(new TransportException(ErrorCode.INTERNAL, name + ": region #"
                                + descriptor.regionId() + ": writer pid " + pid + " still copies into it "
                                + opTimeout.toMillis() + " ms after it was revoked; its slot is kept revoked"));
                        break;
                    }
                    LockSupport.parkNanos(TimeUnit.MICROSECONDS.toNanos(20));
                }
                if (free) {
                    fence.release(slot);
                }
            }
        }

        @Override
        public void close() {
            revoke();
            inner.close();
        }

        @Override
        public String toString() {
            return "SharedRegion{" + descriptor + " in " + file + "@" + fileOffset + "}";
        }
    }
}
