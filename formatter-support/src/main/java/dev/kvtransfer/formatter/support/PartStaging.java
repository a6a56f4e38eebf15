package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.memory.MemoryBuffer;

/**
 * Which parts of a pull a rank moves through staging, and their staging buffers: what both formatters decide the
 * same way for every part of a {@link PartPlan}.
 */
public final class PartStaging {
    private PartStaging() {
    }

    /**
     * Whether this rank moves a part through staging: its plan stages this side, or its pool may not reach the
     * transport (device memory without {@code DEVICE_MEMORY}: each direct message is then one copy through staging,
     * and the messages stay the plan's, so the peer plans as before).
     *
     * @param plan   the part's plan
     * @param poolOk whether the session's transport accepts the pool's memory
     * @return whether the part is staged
     */
    public static boolean staged(PartPlan plan, boolean poolOk) {
        return !plan.selfDirect() || !poolOk;
    }

    /**
     * One staging buffer for each staged part among {@code peers} (a whole part: {@link PartPlan#bytes()}), taken
     * from the session in one call in the order of {@code peers}.
     *
     * @param session the transfer
     * @param peers   peer positions whose plans are set, in order
     * @param plans   plans by peer position
     * @param count   peer positions in all (the length of the result)
     * @param poolOk  whether the session's transport accepts the pool's memory
     * @return staging buffers by peer position; null where a part is direct
     */
    public static MemoryBuffer[] buffers(TransferSession session, int[] peers, PartPlan[] plans, int count,
                                         boolean poolOk) {
        int staged = 0;
        for (int p : peers) {
            if (staged(plans[p], poolOk)) {
                staged++;
            }
        }
        MemoryBuffer[] out = new MemoryBuffer[count];
        if (staged == 0) {
            return out;
        }
        long[] sizes = new long[staged];
        int j = 0;
        for (int p : peers) {
            if (staged(plans[p], poolOk)) {
                sizes[j++] = plans[p].bytes();
            }
        }
        MemoryBuffer[] got = session.stagingBuffers(sizes);
        j = 0;
        for (int p : peers) {
            if (staged(plans[p], poolOk)) {
                out[p] = got[j++];
            }
        }
        return out;
    }
}
