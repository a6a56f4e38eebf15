package dev.kvtransfer.api.memory;

/** Where a {@link MemoryBuffer}'s bytes live. */
public enum MemoryKind {
    /** Ordinary off-heap host memory (direct, page-aligned). */
    HOST,
    /** Page-locked host memory a device can DMA from. */
    PINNED_HOST,
    /** Accelerator memory; not addressable by the CPU. */
    DEVICE
}
