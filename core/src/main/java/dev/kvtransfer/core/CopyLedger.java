package dev.kvtransfer.core;

/**
 * One rank's passes over the KV bytes of one request: the copy ledger, counted while the bytes move. Copies and
 * checksum passes are counted apart.
 *
 * <ul>
 *   <li>{@code bytes}: the KV bytes this rank moved (sent, received, or for a push receiver, had written into its
 *       pool);</li>
 *   <li>{@code staged}: bytes that went through a staging buffer the session handed out, one copy each: the
 *       formatter's gather before a send, or its scatter after a receive;</li>
 *   <li>{@code transport}: the sum of bytes times the transport's passes per byte
 *       ({@code Connection.copiesPerByte}, {@code writeCopiesPerByte}), over the messages whose transport could
 *       tell;</li>
 *   <li>{@code transportUnknown}: bytes of messages whose transport could not tell, and a push receiver's bytes
 *       (the writer moved them);</li>
 *   <li>{@code checksummed}: bytes this rank ran a CRC32C over (part checksums, the journal's checksums, a push
 *       receiver's check of what was written).</li>
 * </ul>
 *
 * <p>The two ends of a transfer each keep their own: staging and checksums are each side's, while the transport's
 * passes are those of the same messages seen from either end, so a request's whole ledger is the context's and
 * the generation's staging and checksums plus one side's transport passes.
 *
 * @param bytes            KV bytes moved
 * @param staged           bytes copied through staging
 * @param transport        bytes times the transport's passes, where known
 * @param transportUnknown bytes whose transport passes are not known
 * @param checksummed      bytes checksummed
 */
public record CopyLedger(long bytes, long staged, long transport, long transportUnknown, long checksummed) {
    /** Nothing moved. */
    public static final CopyLedger NONE = new CopyLedger(0, 0, 0, 0, 0);

    /** @return the two ledgers added */
    public CopyLedger plus(CopyLedger o) {
        return new CopyLedger(bytes + o.bytes, staged + o.staged, transport + o.transport,
                transportUnknown + o.transportUnknown, checksummed + o.checksummed);
    }

    /** @return staging copies per byte moved (0 when nothing moved) */
    public double stagedPerByte() {
        return bytes == 0 ? 0 : (double) staged / bytes;
    }

    /** @return the transport's passes per byte over the bytes where it could tell, or NaN when it never could */
    public double transportPerByte() {
        long known = bytes - transportUnknown;
        return known <= 0 ? Double.NaN : (double) transport / known;
    }

    /** @return checksum passes per byte moved (0 when nothing moved) */
    public double checksumPerByte() {
        return bytes == 0 ? 0 : (double) checksummed / bytes;
    }
}
