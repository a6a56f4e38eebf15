package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The push grants of a generation rank's request: every plane of its blocks after the reused prefix, merged into one
 * registration per contiguous range of a pool region, so a context rank can write there one-sided. The receiver
 * ({@link PushReceive}) and the testkit's formatter harness both register grants through this one rule. Where the
 * transport can tell a write's sender, the grants are bound to the request's counterparts: a peer that learnt a
 * grant's descriptor (it travels in the request info) but is not one of them is refused.
 */
public final class PushGrants {
    private PushGrants() {
    }

    /**
     * Registers a request's grants.
     *
     * @param cache         the rank's pool
     * @param manager       registers memory for one-sided writes
     * @param ids           the rank's block ids of the request
     * @param firstGlobal   the request's global index of {@code ids[0]}
     * @param reused        blocks of the reused prefix (global), not granted
     * @param registrations receives each registration (to revoke when the request ends)
     * @param granted       receives each grant's memory by region id
     * @return the grants, for the context sessions' {@code PeerPool}
     * @throws UnsupportedOperationException when the transport cannot register (the caller revokes what it got)
     */
    public static List<PeerPool.Grant> register(KvCacheView cache, ConnectionManager manager, int[] ids,
                                                int firstGlobal, int reused, List<RegisteredRegion> registrations,
                                                Map<Long, MemoryBuffer> granted) {
        return register(cache, manager, ids, firstGlobal, reused, null, registrations, granted);
    }

    /**
     * Registers a request's grants for the named writers only, where the transport can bind a registration to
     * its writers ({@link ConnectionManager#register(MemoryBuffer, java.util.Set)}); elsewhere the key alone
     * guards them.
     *
     * @param writers the request's counterparts ({@code Connection.peer()} of each), or null for any key holder
     * @see #register(KvCacheView, ConnectionManager, int[], int, int, List, Map)
     */
    public static List<PeerPool.Grant> register(KvCacheView cache, ConnectionManager manager, int[] ids,
                                                int firstGlobal, int reused, java.util.Set<String> writers,
                                                List<RegisteredRegion> registrations,
                                                Map<Long, MemoryBuffer> granted) {
        Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(manager, "manager");
        PoolGeometry geo = cache.geometry();
        BlockLayout bl = cache.layout();
        int segs = geo.segments();
        int n = 0;
        for (int i = 0; i < ids.length; i++) {
            n += firstGlobal + i < reused ? 0 : bl.localLayers() * bl.kvFactor() * segs;
        }
        // One primitive key per plane, (region, offset, segment) packed so that a sort orders by region, then
        // offset: no object per plane (a 128 MiB llama3-8b request has 2,048 planes).
        long[] keys = new long[n];
        int k = 0;
        for (int i = 0; i < ids.length; i++) {
            if (firstGlobal + i < reused) {
                continue;
            }
            for (int l = 0; l < bl.localLayers(); l++) {
                for (int kv = 0; kv < bl.kvFactor(); kv++) {
                    for (int seg = 0; seg < segs; seg++) {
                        keys[k++] = key(geo.region(ids[i], l, kv, seg), geo.planeOffset(ids[i], l, kv, seg), seg);
                    }
                }
            }
        }
        java.util.Arrays.sort(keys);
        List<PeerPool.Grant> grants = new ArrayList<>();
        int i = 0;
        while (i < n) {
            long region = keys[i] >>> REGION_SHIFT;
            long start = (keys[i] >>> SEG_BITS) & OFFSET_MASK;
            long end = start + geo.segmentPlaneBytes((int) (keys[i] & SEG_MASK));
            i++;
            while (i < n && keys[i] >>> REGION_SHIFT == region && ((keys[i] >>> SEG_BITS) & OFFSET_MASK) <= end) {
                long at = (keys[i] >>> SEG_BITS) & OFFSET_MASK;
                end = Math.max(end, at + geo.segmentPlaneBytes((int) (keys[i] & SEG_MASK)));
                i++;
            }
            MemoryBuffer mem = cache.region((int) region).slice(start, end - start);
            RegisteredRegion reg = bound(manager, mem, writers);
            registrations.add(reg);
            granted.put(reg.descriptor().regionId(), mem);
            grants.add(new PeerPool.Grant((int) region, start, reg.descriptor()));
        }
        return grants;
    }

    private static final int SEG_BITS = 7;
    private static final long SEG_MASK = (1L << SEG_BITS) - 1;
    private static final int OFFSET_BITS = 40;
    private static final long OFFSET_MASK = (1L << OFFSET_BITS) - 1;
    private static final int REGION_SHIFT = SEG_BITS + OFFSET_BITS;

    /** A plane's sort key: region (16 bits), byte offset in it (40 bits: 1 TiB), segment (7 bits). */
    private static long key(long region, long offset, int seg) {
        if (region < 0 || region >= 1L << (63 - REGION_SHIFT) || offset < 0 || offset > OFFSET_MASK || seg > SEG_MASK) {
            throw new IllegalArgumentException("plane of region " + region + " at offset " + offset + ", segment "
                    + seg + ": beyond 2^16 regions of 1 TiB and 128 segments");
        }
        return region << REGION_SHIFT | offset << SEG_BITS | seg;
    }

    private static RegisteredRegion bound(ConnectionManager manager, MemoryBuffer mem, java.util.Set<String> writers) {
        if (writers != null) {
            try {
                return manager.register(mem, writers);
            } catch (UnsupportedOperationException cannotBind) {
                // Native RMA, or a transport without the overload: the key is the guard.
            }
        }
        return manager.register(mem);
    }
}
