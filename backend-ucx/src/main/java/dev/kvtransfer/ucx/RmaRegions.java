package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucs.UcsConstants;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The owner side of native one-sided writes. {@link #register} maps the memory with {@code ucp_mem_map} and
 * hands out a descriptor whose key is a 16-byte random capability followed by UCX's packed rkey. With native RMA
 * the owner's CPU does not see a write land, and UCX's software-RMA and CMA paths do not check bounds, so a
 * writer may use a descriptor only after this owner confirmed it over the authenticated control connection
 * (VALIDATE → VALIDATED): the owner answers yes only for a live registration whose id, address, length and whole
 * key match. {@link Region#close()} refuses new validations at once, sends REVOKE to every writer that validated
 * the region, waits (at most the default timeout) for each to acknowledge after its batch in flight ended, gives
 * up on a writer that does not (its connection is closed, so its endpoint goes), and only then unmaps: when it
 * returns, no write of a well-behaved writer can land (quiescence).
 *
 * <p>Control frames: VALIDATE {@code u64 request, u64 region, u64 address, u64 length, bytes key};
 * VALIDATED {@code u64 request, u8 status (0 = valid, else 1 + ErrorCode ordinal), bytes reason};
 * REVOKE {@code u64 region}; REVOKED {@code u64 region}.
 */
final class RmaRegions {
    static final int CAPABILITY_BYTES = 16;

    private final UcxConnectionManager manager;
    private final UcpContext context;
    private final UcxErrors errors;
    private final SecureRandom random = new SecureRandom();
    private final AtomicLong nextId = new AtomicLong(1);
    private final Map<Long, Region> regions = new ConcurrentHashMap<>();
    private final boolean cudaMemory;
    private BootstrapAgent bootstrap;

    RmaRegions(UcxConnectionManager manager, UcpContext context, UcxErrors errors, boolean cudaMemory) {
        this.manager = manager;
        this.context = context;
        this.errors = errors;
        this.cudaMemory = cudaMemory;
    }

    void wire(BootstrapAgent bootstrap) {
        this.bootstrap = bootstrap;
    }

    int registered() {
        return regions.size();
    }

    /** Maps memory for peers' writes (the mapping runs on the progress agent, which owns the context's use). */
    RegisteredRegion register(MemoryBuffer memory) {
        int memType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST;
        if (memory.kind() == MemoryKind.DEVICE) {
            if (!cudaMemory) {
                throw new UnsupportedOperationException("UCX transport: DEVICE memory cannot be registered here: the"
                        + " loaded libucp reports no CUDA memory support");
            }
            memType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA;
        }
        int mt = memType;
        UcpMemory mem = manager.callOnAgent("register " + memory.size() + " bytes", () -> context.memoryMap(
                new UcpMemMapParams().setAddress(memory.address()).setLength(memory.size()).setMemoryType(mt)));
        ByteBuffer rkey = mem.getRemoteKeyBuffer();
        byte[] key = new byte[CAPABILITY_BYTES + rkey.remaining()];
        byte[] capability = new byte[CAPABILITY_BYTES];
        random.nextBytes(capability);
        System.arraycopy(capability, 0, key, 0, CAPABILITY_BYTES);
        rkey.get(key, CAPABILITY_BYTES, key.length - CAPABILITY_BYTES);
        if (key.length > RegionDescriptor.MAX_KEY_BYTES) {
            manager.callOnAgent("deregister", () -> {
                mem.deregister();
                return null;
            });
            throw new TransportException(ErrorCode.INTERNAL, "UCX packed rkey of " + (key.length - CAPABILITY_BYTES)
                    + " bytes does not fit a descriptor key (" + RegionDescriptor.MAX_KEY_BYTES + ")");
        }
        long id = nextId.getAndIncrement();
        Region r = new Region(id, memory, mem, new RegionDescriptor(manager.localAddress(), id, memory.address(),
                memory.size(), key));
        regions.put(id, r);
        return r;
    }

    // ---------------------------------------------------------------- control frames (bootstrap agent)

    /** A writer asks whether a descriptor is live here. */
    void onValidate(UcxConnection from, BootstrapFrames.Reader r) throws BootstrapFrames.Violation {
        long request = r.i64("request");
        long id = r.i64("region");
        long address = r.i64("address");
        long length = r.i64("length");
        byte[] key = r.bytes("key", RegionDescriptor.MAX_KEY_BYTES);
        r.end();
        Region region = regions.get(id);
        ErrorCode code = null;
        String why = null;
        if (region == null) {
            boolean issued = id > 0 && id < nextId.get();
            code = issued ? ErrorCode.CANCELLED : ErrorCode.UNAUTHORIZED;
            why = issued ? "region #" + id + " was deregistered" : "no region #" + id + " here";
        } else if (region.revoked) {
            code = ErrorCode.CANCELLED;
            why = "region #" + id + " was deregistered";
        } else if (!MessageDigest.isEqual(key, region.key)) {
            code = ErrorCode.UNAUTHORIZED;
            why = "wrong key for region #" + id;
        } else if (address != region.descriptor.address() || length != region.descriptor.length()) {
            code = ErrorCode.UNAUTHORIZED;
            why = "region #" + id + " is not " + length + " bytes at 0x" + Long.toHexString(address)
                    + " as the descriptor claims";
        }
        ByteBuffer reply = BootstrapFrames.buffer(16 + 200);
        reply.putLong(request);
        if (code == null) {
            region.validatedBy.add(from);
            reply.put((byte) 0).putShort((short) 0);
        } else {
            byte[] w = why.getBytes(StandardCharsets.UTF_8);
            reply.put((byte) (1 + code.ordinal())).putShort((short) w.length).put(w);
            errors.report("rma", new TransportException(code, "UCX manager '" + manager.name() + "': refused a "
                    + "one-sided write descriptor from " + from.peer + ": " + why));
        }
        bootstrap.sendControl(from, BootstrapFrames.VALIDATED, reply.flip());
    }

    /** A writer acknowledged a revocation: it will not write the region again. */
    void onRevoked(UcxConnection from, BootstrapFrames.Reader r) throws BootstrapFrames.Violation {
        long id = r.i64("region");
        r.end();
        Region region = regions.get(id);
        if (region != null) {
            region.acked(from);
        }
    }

    /** A writer's control connection is gone: it cannot acknowledge, and its endpoint is being closed. */
    void onConnectionLost(UcxConnection c) {
        for (Region region : regions.values()) {
            region.acked(c);
        }
    }

    /** Closing the manager: every region is gone with it (peers hear BYE). */
    void closeAll() {
        for (Region r : regions.values()) {
            r.revoked = true;
            r.pending.complete(null);
        }
    }

    /** Unmaps what is left (progress agent, shutdown). */
    void unmapAll() {
        for (Region r : regions.values()) {
            r.unmap();
        }
        regions.clear();
    }

    /** One registration. */
    final class Region implements RegisteredRegion {
        final long id;
        final MemoryBuffer memory;
        final UcpMemory mem;
        final RegionDescriptor descriptor;
        final byte[] key;
        /** Writers that validated the region (bootstrap agent). */
        final Set<UcxConnection> validatedBy = new HashSet<>();
        /** Writers still to acknowledge a revocation (bootstrap agent). */
        final Set<UcxConnection> awaiting = new HashSet<>();
        final CompletableFuture<Void> pending = new CompletableFuture<>();
        volatile boolean revoked;
        private boolean unmapped;

        Region(long id, MemoryBuffer memory, UcpMemory mem, RegionDescriptor descriptor) {
            this.id = id;
            this.memory = memory;
            this.mem = mem;
            this.descriptor = descriptor;
            this.key = descriptor.key();
        }

        void acked(UcxConnection c) {
            if (awaiting.remove(c) && awaiting.isEmpty()) {
                pending.complete(null);
            }
            validatedBy.remove(c);
        }

        @Override
        public RegionDescriptor descriptor() {
            return descriptor;
        }

        @Override
        public MemoryBuffer memory() {
            return memory;
        }

        @Override
        public void close() {
            synchronized (this) {
                if (revoked) {
                    return;
                }
                revoked = true;
            }
            long timeoutMs = manager.defaultTimeout().toMillis();
            if (manager.isRunning()) {
                bootstrap.execute(() -> {
                    for (UcxConnection c : validatedBy) {
                        ByteBuffer b = BootstrapFrames.buffer(8);
                        b.putLong(id).flip();
                        if (bootstrap.sendControl(c, BootstrapFrames.REVOKE, b)) {
                            awaiting.add(c);
                        }
                    }
                    validatedBy.clear();
                    if (awaiting.isEmpty()) {
                        pending.complete(null);
                    }
                });
                try {
                    pending.get(timeoutMs, TimeUnit.MILLISECONDS);
                } catch (java.util.concurrent.TimeoutException e) {
                    CompletableFuture<Void> given = new CompletableFuture<>();
                    bootstrap.execute(() -> {
                        for (UcxConnection c : Set.copyOf(awaiting)) {
                            errors.report("rma", new TransportException(ErrorCode.TIMEOUT, "UCX manager '"
                                    + manager.name() + "': writer " + c.peer + " did not acknowledge the revocation of"
                                    + " region #" + id + " within " + timeoutMs + " ms; its connection is closed"));
                            bootstrap.lose(c, ErrorCode.PEER_LOST, "did not acknowledge a revocation of region #"
                                    + id + " within " + timeoutMs + " ms");
                        }
                        awaiting.clear();
                        given.complete(null);
                    });
                    try {
                        given.get(timeoutMs, TimeUnit.MILLISECONDS);
                    } catch (Exception ignored) {
                        // Closing meanwhile.
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (java.util.concurrent.ExecutionException e) {
                    // Not completed exceptionally.
                }
            }
            regions.remove(id);
            try {
                manager.callOnAgent("deregister region #" + id, () -> {
                    unmap();
                    return null;
                });
            } catch (TransportClosedException e) {
                // The manager closed: its shutdown unmapped everything.
            }
        }

        /** Progress agent only. */
        void unmap() {
            if (unmapped) {
                return;
            }
            unmapped = true;
            try {
                mem.deregister();
            } catch (UcxException | IllegalStateException e) {
                errors.report("rma", new TransportException(ErrorCode.INTERNAL, "ucp_mem_unmap of region #" + id
                        + " failed: " + e.getMessage(), e));
            }
        }

        @Override
        public String toString() {
            return "UcxRegion{" + descriptor + (revoked ? ", revoked" : "") + "}";
        }
    }
}
