package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.core.cache.PagedKvCache;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The receiving side of a push in {@link FormatterHarness}: the grants a generation rank gives one request, and the
 * check of what the context ranks wrote into them. Both follow core's {@code CacheReceiver} (its grants are private
 * to it, so they are restated here; the element check itself is core's {@code KvPattern}, not a copy).
 */
final class PushChecks {
    private PushChecks() {
    }

    /**
     * Registers, for one request only, the bytes of a generation rank's blocks after the reused prefix: every
     * (layer, kv, segment) plane of each block, merged into runs per region: core's rule ({@code PushGrants}).
     *
     * @param cache         the rank's pool
     * @param manager       the rank's transport endpoint
     * @param ids           the request's block ids on the rank
     * @param firstGlobal   global index of {@code ids[0]}
     * @param reused        blocks of the reused prefix (not granted)
     * @param registrations receives the registrations, for revoking them
     * @param granted       receives each grant's memory by region id
     * @return the grants, for the context sessions' {@code PeerPool}
     */
    static List<PeerPool.Grant> registerGrants(PagedKvCache cache, ConnectionManager manager, int[] ids,
                                               int firstGlobal, int reused, List<RegisteredRegion> registrations,
                                               Map<Long, MemoryBuffer> granted) {
        return dev.kvtransfer.core.transfer.PushGrants.register(cache, manager, ids, firstGlobal, reused,
                registrations, granted);
    }

    /**
     * Checks every entry written into one generation rank as core's receiver does: inside this request's grants,
     * unchanged since written, only from picked context ranks, no byte written twice, and together exactly the
     * bytes expected.
     *
     * @param log        what was written
     * @param mem        each grant's memory by region id
     * @param who        names the request and rank in violations
     * @param picked     per context rank, whether this rank receives from it
     * @param expected   bytes of the rank's blocks after the reused prefix
     * @param reused     blocks of the reused prefix (for the message)
     * @param violations receives what broke
     * @return the bytes written
     */
    static long checkWrites(WriteLog log, Map<Long, MemoryBuffer> mem, String who, boolean[] picked, long expected,
                            int reused, List<String> violations) {
        Map<Long, List<long[]>> byRegion = new HashMap<>();
        long total = 0;
        int n = log.size();
        for (int i = 0; i < n; i++) {
            int writer = log.writer(i);
            long region = log.region(i);
            long off = log.offset(i);
            long len = log.length(i);
            MemoryBuffer m = mem.get(region);
            if (m == null || off < 0 || len < 0 || off > m.size() - len) {
                violations.add(who + ": ctx rank " + writer + " wrote " + len + " bytes at offset " + off
                        + " of grant #" + region + ", outside what this request granted");
                continue;
            }
            if (!picked[writer]) {
                violations.add(who + ": ctx rank " + writer + " wrote " + len + " bytes into it, but it does not"
                        + " receive from that rank (not picked: another rank of a duplicate group is designated)");
            }
            if (log.checksums() && WriteLog.crc(m, off, len) != log.crc(i)) {
                violations.add(who + ": the " + len + " bytes ctx rank " + writer + " wrote at offset " + off
                        + " of grant #" + region + " changed after the write (overwritten by a later entry)");
            }
            total += len;
            byRegion.computeIfAbsent(region, k -> new ArrayList<>()).add(new long[] {off, len, writer});
        }
        if (total != expected) {
            violations.add(who + ": the ctx ranks wrote " + total + " bytes into its blocks, " + expected
                    + " were expected (the blocks after the " + reused + " reused: partial or doubled push)");
        }
        for (Map.Entry<Long, List<long[]>> e : byRegion.entrySet()) {
            List<long[]> runs = e.getValue();
            runs.sort((a, b) -> Long.compare(a[0], b[0]));
            for (int i = 1; i < runs.size(); i++) {
                long[] a = runs.get(i - 1);
                long[] b = runs.get(i);
                if (b[0] < a[0] + a[1]) {
                    violations.add(who + ": writes of ctx ranks " + a[2] + " and " + b[2] + " overlap in grant #"
                            + e.getKey() + " at byte offset " + b[0] + " (a byte written twice)");
                    break;
                }
            }
        }
        return total;
    }
}
