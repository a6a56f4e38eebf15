package dev.kvtransfer.api.model;

/**
 * Element type of the KV cache. Formatters move elements as raw bytes, so only the width matters to them.
 */
public enum DataType {
    /** 32-bit IEEE float. */
    FLOAT32(4, 0),
    /** 16-bit IEEE float. */
    FLOAT16(2, 1),
    /** bfloat16. */
    BFLOAT16(2, 2),
    /** 8-bit float (E4M3 or E5M2: the bytes are moved as they are). */
    FP8(1, 3),
    /** 8-bit integer. */
    INT8(1, 4),
    /** 8-bit unsigned integer (used by the MLA indexer-K pool). */
    UINT8(1, 5),
    /** 64-bit IEEE float. */
    FLOAT64(8, 6);

    private final int bytes;
    private final int wireId;

    DataType(int bytes, int wireId) {
        this.bytes = bytes;
        this.wireId = wireId;
    }

    /**
     * Width of one element.
     *
     * @return bytes per element
     */
    public int bytes() {
        return bytes;
    }

    /**
     * Stable identifier on the wire (never the ordinal).
     *
     * @return the wire id
     */
    public int wireId() {
        return wireId;
    }

    /**
     * Looks a type up by its wire id.
     *
     * @param wireId the id read from the wire
     * @return the type, or {@code null} when unknown
     */
    public static DataType fromWireId(int wireId) {
        for (DataType t : values()) {
            if (t.wireId == wireId) {
                return t;
            }
        }
        return null;
    }
}
