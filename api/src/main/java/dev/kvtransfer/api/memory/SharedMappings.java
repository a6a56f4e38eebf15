package dev.kvtransfer.api.memory;

import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentSkipListMap;

/**
 * This process's memory that lives in files other processes of the host may map (a {@code /dev/shm} file of mode
 * {@code 0600}), by address: a memory plugin that allocates such memory records each mapping here, and a transport
 * asks, for memory it is told to register, whether and where a peer process could reach it with a single copy. The
 * path is a capability: a transport hands it only to a peer that proved the deployment secret. Thread-safe.
 */
public final class SharedMappings {
    /**
     * One mapping of a shared file.
     *
     * @param address    first byte of the mapping in this process
     * @param length     bytes mapped
     * @param file       absolute path of the file
     * @param fileOffset the file offset of {@code address}
     */
    public record Mapping(long address, long length, String file, long fileOffset) {
        /**
         * Validates.
         *
         * @param address    address
         * @param length     length
         * @param file       path
         * @param fileOffset offset in the file
         */
        public Mapping {
            Objects.requireNonNull(file, "file");
            if (length <= 0 || fileOffset < 0) {
                throw new IllegalArgumentException("mapping of " + length + " bytes at file offset " + fileOffset);
            }
        }

        /**
         * @param at    an address
         * @param bytes a byte count
         * @return whether {@code [at, at + bytes)} lies inside this mapping (no overflow)
         */
        public boolean contains(long at, long bytes) {
            return bytes >= 0 && at >= address && at - address <= length && bytes <= length - (at - address);
        }
    }

    private static final ConcurrentSkipListMap<Long, Mapping> BY_ADDRESS = new ConcurrentSkipListMap<>();

    private SharedMappings() {
    }

    /**
     * Records a mapping (its allocator calls this once it is mapped).
     *
     * @param mapping the mapping
     */
    public static void add(Mapping mapping) {
        Objects.requireNonNull(mapping, "mapping");
        BY_ADDRESS.put(mapping.address(), mapping);
    }

    /**
     * Forgets a mapping (its allocator calls this before unmapping it).
     *
     * @param mapping the mapping
     */
    public static void remove(Mapping mapping) {
        Objects.requireNonNull(mapping, "mapping");
        BY_ADDRESS.remove(mapping.address(), mapping);
    }

    /**
     * The shared mapping holding all of {@code [address, address + length)}.
     *
     * @param address first byte
     * @param length  byte count
     * @return the mapping, or {@code null} when the range is (partly) private memory
     */
    public static Mapping find(long address, long length) {
        Map.Entry<Long, Mapping> e = BY_ADDRESS.floorEntry(address);
        return e != null && e.getValue().contains(address, length) ? e.getValue() : null;
    }

    /** @return mappings currently recorded */
    public static int count() {
        return BY_ADDRESS.size();
    }
}
