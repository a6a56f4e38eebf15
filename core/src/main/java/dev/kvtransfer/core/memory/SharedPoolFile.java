package dev.kvtransfer.core.memory;

import dev.kvtransfer.api.memory.SharedMappings;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A KV pool region in a {@code /dev/shm} file that only this uid may open (created {@code 0600} in one step), mapped
 * shared and recorded in {@link SharedMappings}, so that a transport can let an authenticated peer process of this
 * host write into it with one copy. Closing unmaps it and deletes the file. The name carries this process's pid; a
 * file left by a process that died without closing (kill -9) is deleted by the next process that creates one.
 */
final class SharedPoolFile implements AutoCloseable {
    /** Where the files live: tmpfs on Linux. */
    static final Path DIR = Path.of("/dev/shm");
    /** File name prefix; the pid and 16 random bytes follow. */
    static final String PREFIX = "kvtransfer-pool-";
    /** Headroom left on the file system: a tmpfs page that cannot be backed is a SIGBUS, not an exception. */
    private static final long HEADROOM = 256L << 20;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final AtomicBoolean SWEPT = new AtomicBoolean();
    /** Zeros written to reserve a file's pages (read-only use: duplicates only). */
    private static final ByteBuffer ZEROS = ByteBuffer.allocateDirect(1 << 20);

    private final Path path;
    private final MappedByteBuffer mapped;
    private final SharedMappings.Mapping mapping;
    private final AtomicBoolean open = new AtomicBoolean(true);

    private SharedPoolFile(Path path, MappedByteBuffer mapped, SharedMappings.Mapping mapping) {
        this.path = path;
        this.mapped = mapped;
        this.mapping = mapping;
    }

    /**
     * Creates and maps a file of {@code bytes}, or returns null when this host cannot have one (no {@code /dev/shm},
     * too little room on it, larger than one mapping may be): the caller then uses private memory.
     *
     * @param bytes size, at least 1
     * @return the file, or null
     */
    static SharedPoolFile create(long bytes) {
        if (bytes < 1 || bytes > Integer.MAX_VALUE || !Files.isDirectory(DIR) || !Files.isWritable(DIR)) {
            return null;
        }
        sweepOnce();
        Path p = null;
        try {
            if (Files.getFileStore(DIR).getUsableSpace() < bytes + HEADROOM) {
                return null;
            }
            byte[] r = new byte[16];
            RANDOM.nextBytes(r);
            p = DIR.resolve(PREFIX + ProcessHandle.current().pid() + "-" + HexFormat.of().formatHex(r));
            Files.createFile(p, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            MappedByteBuffer m;
            try (RandomAccessFile f = new RandomAccessFile(p.toFile(), "rw")) {
                f.setLength(bytes);
                reserve(f.getChannel(), bytes);
                m = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, bytes);
            }
            SharedMappings.Mapping mapping = new SharedMappings.Mapping(MemoryAccess.address(m), bytes,
                    p.toString(), 0);
            SharedMappings.add(mapping);
            return new SharedPoolFile(p, m, mapping);
        } catch (IOException | RuntimeException e) {
            if (p != null) {
                try {
                    Files.deleteIfExists(p);
                } catch (IOException ignored) {
                    // Best effort: the sweep of a later process removes it.
                }
            }
            return null;
        }
    }

    /**
     * Writes the file's pages once, so that a full tmpfs is an {@link IOException} here (and the pool falls back to
     * private memory) rather than a bus error at the first touch of an unbacked page.
     */
    private static void reserve(FileChannel ch, long bytes) throws IOException {
        ByteBuffer zeros = ZEROS.duplicate();
        for (long pos = 0; pos < bytes; ) {
            zeros.clear().limit((int) Math.min(zeros.capacity(), bytes - pos));
            pos += ch.write(zeros, pos);
        }
    }

    /** @return the first byte */
    long address() {
        return mapping.address();
    }

    /** @return the file */
    Path path() {
        return path;
    }

    /** Forgets, unmaps and deletes. Idempotent. */
    @Override
    public void close() {
        if (!open.compareAndSet(true, false)) {
            return;
        }
        SharedMappings.remove(mapping);
        MemoryAccess.unmap(mapped);
        try {
            Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // Unmapped already; the sweep of a later process removes the name.
        }
    }

    /** Deletes pool files of processes that no longer run (and that this uid may delete). */
    private static void sweepOnce() {
        if (!SWEPT.compareAndSet(false, true)) {
            return;
        }
        try (DirectoryStream<Path> s = Files.newDirectoryStream(DIR, PREFIX + "*")) {
            for (Path f : s) {
                String rest = f.getFileName().toString().substring(PREFIX.length());
                int dash = rest.indexOf('-');
                try {
                    long pid = Long.parseLong(dash < 0 ? rest : rest.substring(0, dash));
                    if (ProcessHandle.of(pid).isEmpty()) {
                        Files.deleteIfExists(f);
                    }
                } catch (NumberFormatException | IOException ignored) {
                    // Not ours, or not ours to delete.
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // Nothing to sweep.
        }
    }

    @Override
    public String toString() {
        return "SharedPoolFile[" + path + ", " + mapping.length() + " B]";
    }
}
