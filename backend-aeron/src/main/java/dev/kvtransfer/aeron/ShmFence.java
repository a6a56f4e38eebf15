package dev.kvtransfer.aeron;

import org.agrona.IoUtil;
import org.agrona.concurrent.UnsafeBuffer;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The revocation words of one owner's shared-memory grants: a small {@code /dev/shm} file (mode {@code 0600}) of
 * {@value #SLOTS} 8-byte slots that the owner and its writers map. A writer gets one slot per (grant, writer) and
 * the slot's generation; before each piece it copies into the owner's pool it increments the slot's in-flight
 * count, which fails once the owner revoked the slot or gave it to someone else (another generation), and
 * decrements it after. So once the owner has revoked a slot and seen its count at 0 (or the writer process gone),
 * no byte of that writer lands in the grant any more. The header holds a random token the owner also sends over
 * the authenticated connection: a writer that reads the same token mapped the same memory, i.e. runs on this host.
 *
 * <p>Slot word: generation in bits 63..32, revoked in bit 31, in-flight count in bits 30..0. After the slot words, per
 * slot the pid and pid namespace of the writer that claimed it ({@link #claim}): a slot the owner handed out with the
 * grant itself ({@link ShmOwner}, in the region key) has no exchange that names its writer, so the writer writes
 * itself in, and a revocation can still tell that a writer that left a count behind is gone.
 */
final class ShmFence implements AutoCloseable {
    static final String PREFIX = "kvtransfer-fence-";
    static final int SLOTS = 8192;
    static final int HEADER = 64;
    static final int TOKEN_BYTES = 16;
    static final long BYTES = HEADER + 24L * SLOTS;
    private static final int WRITERS_AT = HEADER + 8 * SLOTS;
    private static final int MAGIC = 0x314d4853; // "SHM1"
    private static final long REVOKED = 1L << 31;
    private static final long COUNT = REVOKED - 1;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final AtomicBoolean SWEPT = new AtomicBoolean();

    final Path path;
    final byte[] token;
    private final MappedByteBuffer mapped;
    private final UnsafeBuffer words;
    /** Owner side: the generation each slot was last handed out with, and the slots free to hand out. */
    private final int[] generation;
    private final ArrayDeque<Integer> free;
    private final AtomicBoolean open = new AtomicBoolean(true);

    private ShmFence(Path path, byte[] token, MappedByteBuffer mapped, boolean owner) {
        this.path = path;
        this.token = token;
        this.mapped = mapped;
        this.words = new UnsafeBuffer(mapped);
        this.generation = owner ? new int[SLOTS] : null;
        this.free = owner ? new ArrayDeque<>(SLOTS) : null;
        if (owner) {
            for (int i = 0; i < SLOTS; i++) {
                free.add(i);
            }
        }
    }

    /**
     * Creates the owner's fence file.
     *
     * @return the fence
     * @throws IOException when {@code /dev/shm} cannot hold it
     */
    static ShmFence create() throws IOException {
        sweepOnce();
        byte[] r = new byte[16];
        RANDOM.nextBytes(r);
        Path p = Path.of("/dev/shm", PREFIX + ProcessHandle.current().pid() + "-" + HexFormat.of().formatHex(r));
        Files.createFile(p, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        try {
            MappedByteBuffer m;
            try (RandomAccessFile f = new RandomAccessFile(p.toFile(), "rw")) {
                f.setLength(BYTES);
                m = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, BYTES);
            }
            byte[] token = new byte[TOKEN_BYTES];
            RANDOM.nextBytes(token);
            ShmFence fence = new ShmFence(p, token, m, true);
            fence.words.putBytes(8, token);
            fence.words.putIntVolatile(0, MAGIC);
            return fence;
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(p);
            throw e;
        }
    }

    /**
     * Maps an owner's fence file as a writer, if it is the one the owner described.
     *
     * @param path  the file the owner named
     * @param token the token the owner sent
     * @return the fence, or null when the file is not there or holds another token (not this host's memory)
     */
    static ShmFence open(String path, byte[] token) {
        File f = new File(path);
        if (!f.isFile() || f.length() != BYTES) {
            return null;
        }
        MappedByteBuffer m;
        try {
            m = IoUtil.mapExistingFile(f, FileChannel.MapMode.READ_WRITE, "fence", 0, BYTES);
        } catch (RuntimeException e) {
            return null;
        }
        ShmFence fence = new ShmFence(Path.of(path), token.clone(), m, false);
        byte[] found = new byte[TOKEN_BYTES];
        fence.words.getBytes(8, found);
        if (fence.words.getIntVolatile(0) != MAGIC || !java.security.MessageDigest.isEqual(found, token)) {
            fence.close();
            return null;
        }
        return fence;
    }

    private static int at(int slot) {
        return HEADER + 8 * slot;
    }

    // ------------------------------------------------------------------ owner side

    /** @return a fresh slot (new generation, not revoked, count 0), or -1 when all are in use */
    synchronized int allocate() {
        Integer s = free.poll();
        if (s == null) {
            return -1;
        }
        int g = ++generation[s];
        words.putLongVolatile(WRITERS_AT + 16 * s, 0);
        words.putLongVolatile(WRITERS_AT + 16 * s + 8, -1);
        words.putLongVolatile(at(s), (long) g << 32);
        return s;
    }

    /** @return the pid the slot's writer claimed it with, or 0 */
    long writerPid(int slot) {
        return words.getLongVolatile(WRITERS_AT + 16 * slot);
    }

    /** @return the pid namespace the slot's writer claimed it with, or -1 */
    long writerPidNamespace(int slot) {
        return words.getLongVolatile(WRITERS_AT + 16 * slot + 8);
    }

    /**
     * @param slot a slot from {@link #allocate}
     * @return its current generation
     */
    synchronized int generation(int slot) {
        return generation[slot];
    }

    /**
     * Refuses every later acquire of the slot.
     *
     * @param slot the slot
     */
    void revoke(int slot) {
        int i = at(slot);
        long w;
        do {
            w = words.getLongVolatile(i);
        } while ((w & REVOKED) == 0 && !words.compareAndSetLong(i, w, w | REVOKED));
    }

    /**
     * @param slot the slot
     * @return pieces being copied under it now
     */
    int inFlight(int slot) {
        return (int) (words.getLongVolatile(at(slot)) & COUNT);
    }

    /**
     * Gives a revoked slot back (its count is 0, or its writer is gone).
     *
     * @param slot the slot
     */
    synchronized void release(int slot) {
        words.putLongVolatile(at(slot), REVOKED);
        free.add(slot);
    }

    // ------------------------------------------------------------------ writer side

    /**
     * Writes this writer's pid into a slot it was handed with a grant, before its first piece, so the owner can tell
     * when it is gone.
     *
     * @param slot         the slot
     * @param pid          this process
     * @param pidNamespace this process's pid namespace
     */
    void claim(int slot, long pid, long pidNamespace) {
        words.putLongVolatile(WRITERS_AT + 16 * slot + 8, pidNamespace);
        words.putLongVolatile(WRITERS_AT + 16 * slot, pid);
    }

    /**
     * Starts one piece under a slot.
     *
     * @param slot       the slot
     * @param generation the generation it was handed out with
     * @return false when the slot was revoked or reused: nothing may be written
     */
    boolean enter(int slot, int generation) {
        int i = at(slot);
        while (true) {
            long w = words.getLongVolatile(i);
            if ((int) (w >>> 32) != generation || (w & REVOKED) != 0) {
                return false;
            }
            if (words.compareAndSetLong(i, w, w + 1)) {
                return true;
            }
        }
    }

    /**
     * Ends a piece started by a successful {@link #enter}.
     *
     * @param slot the slot
     */
    void exit(int slot) {
        words.getAndAddLong(at(slot), -1);
    }

    /** @return false once unmapped here */
    boolean isOpen() {
        return open.get();
    }

    /** Unmaps; the owner also deletes the file. Idempotent. */
    @Override
    public void close() {
        if (!open.compareAndSet(true, false)) {
            return;
        }
        IoUtil.unmap(mapped);
        if (generation != null) {
            try {
                Files.deleteIfExists(path);
            } catch (IOException ignored) {
                // Unmapped already; the sweep of a later process removes the name.
            }
        }
    }

    /** Deletes fence files of processes that no longer run. */
    private static void sweepOnce() {
        if (!SWEPT.compareAndSet(false, true)) {
            return;
        }
        try (DirectoryStream<Path> s = Files.newDirectoryStream(Path.of("/dev/shm"), PREFIX + "*")) {
            for (Path f : s) {
                String rest = f.getFileName().toString().substring(PREFIX.length());
                int dash = rest.indexOf('-');
                try {
                    if (ProcessHandle.of(Long.parseLong(dash < 0 ? rest : rest.substring(0, dash))).isEmpty()) {
                        Files.deleteIfExists(f);
                    }
                } catch (NumberFormatException | IOException ignored) {
                    // Not ours to delete.
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // Nothing to sweep.
        }
    }

    @Override
    public String toString() {
        return "ShmFence[" + path + ", token " + HexFormat.of().formatHex(Arrays.copyOf(token, 2)) + "..]";
    }
}
