package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The owner-side registry of one-sided writes, shared by the emulation and MPI: ids, keys, checks, revocation. */
class RegionRegistryTest {
    private final MemoryBuffer memory = ControlMemory.withAddresses("test", b -> 4096L).allocate(64, MemoryKind.HOST);

    private static RegisteredRegion handle(RegionRegistry.Registration r) {
        return new RegisteredRegion() {
            @Override
            public RegionDescriptor descriptor() {
                return r.descriptor();
            }

            @Override
            public MemoryBuffer memory() {
                return r.memory();
            }

            @Override
            public void close() {
                r.revoke(System.nanoTime(), false);
            }
        };
    }

    private static RegionRegistry.Registration published(RegionRegistry reg, MemoryBuffer m, Set<String> writers) {
        RegionRegistry.Registration r = reg.issue("owner", m, writers);
        reg.publish(r, handle(r));
        return r;
    }

    @Test
    void anIssuedRegionIsInvisibleUntilPublishedThenGrantsMatchingEntries() throws Exception {
        RegionRegistry reg = new RegionRegistry();
        RegionRegistry.Registration r = reg.issue("owner", memory, null);
        RegionDescriptor d = r.descriptor();
        assertThat(d.owner()).isEqualTo("owner");
        assertThat(d.key()).hasSize(RegionRegistry.KEY_BYTES);
        assertThat(reg.size()).isZero();
        assertThatThrownBy(() -> reg.acquire(d.regionId(), d.key(), "w", 4096L, 0, 8))
                .isInstanceOfSatisfying(RegionRegistry.Refusal.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.CANCELLED));
        reg.publish(r, handle(r));
        assertThat(reg.size()).isEqualTo(1);
        assertThat(reg.registrations()).containsExactly(r);
        assertThat(reg.acquire(d.regionId(), d.key(), "w", 4096L, 0, 64)).isSameAs(r);
        r.release();
    }

    @Test
    void everyRefusalNamesItsCodeAndReasonInTheDocumentedOrder() throws Exception {
        RegionRegistry reg = new RegionRegistry();
        RegionRegistry.Registration r = published(reg, memory, Set.of("alice"));
        long id = r.descriptor().regionId();
        byte[] key = r.descriptor().key();
        byte[] wrong = Arrays.copyOf(key, key.length);
        wrong[0] ^= 1;
        assertRefused(reg, 99, key, "alice", 4096L, 0, 8, ErrorCode.UNAUTHORIZED, "no region #99 here");
        assertRefused(reg, id, wrong, "alice", 4096L, 0, 8, ErrorCode.UNAUTHORIZED, "wrong key for region #" + id);
        assertRefused(reg, id, key, "bob", 4096L, 0, 8, ErrorCode.UNAUTHORIZED,
                "region #" + id + " is granted to other peers, not to bob");
        assertRefused(reg, id, key, "alice", 8192L, 0, 8, ErrorCode.UNAUTHORIZED,
                "region #" + id + " is not at the address its descriptor claims");
        assertRefused(reg, id, key, "alice", 4096L, 60, 8, ErrorCode.MALFORMED,
                "8 bytes at offset 60 leave region #" + id + " of 64 bytes");
        assertThat(r.revoke(System.nanoTime(), false)).isZero();
        assertRefused(reg, id, key, "alice", 4096L, 0, 8, ErrorCode.CANCELLED, "region #" + id + " was deregistered");
        assertThat(reg.size()).isZero();
    }

    @Test
    void aRegionWithoutWritersTakesAnyWriterEvenAnUnknownOne() throws Exception {
        RegionRegistry reg = new RegionRegistry();
        RegionRegistry.Registration r = published(reg, memory, null);
        assertThat(reg.acquire(r.id(), r.descriptor().key(), null, 4096L, 8, 8)).isSameAs(r);
        r.release();
        RegionRegistry.Registration bound = published(reg, memory, Set.of("alice"));
        assertRefused(reg, bound.id(), bound.descriptor().key(), null, 4096L, 0, 8, ErrorCode.UNAUTHORIZED,
                "is granted to other peers, not to null");
    }

    @Test
    void revokeWaitsForTheBatchesInFlightUpToItsDeadline() throws Exception {
        RegionRegistry reg = new RegionRegistry();
        RegionRegistry.Registration r = published(reg, memory, null);
        reg.acquire(r.id(), r.descriptor().key(), "w", 4096L, 0, 8);
        reg.acquire(r.id(), r.descriptor().key(), "w", 4096L, 8, 8);
        assertThat(r.revoke(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(20), false)).isEqualTo(2);
        CompletableFuture<Integer> waiting = CompletableFuture.supplyAsync(
                () -> r.revoke(System.nanoTime() + TimeUnit.SECONDS.toNanos(30), false));
        r.release();
        r.release();
        assertThat(waiting.get(30, TimeUnit.SECONDS)).isZero();
        assertThat(r.revoke(System.nanoTime(), true)).as("once: already drained").isEqualTo(-1);
        assertThat(r.revoke(System.nanoTime(), false)).isZero();
    }

    private static void assertRefused(RegionRegistry reg, long id, byte[] key, String writer, long address,
                                      long offset, long length, ErrorCode code, String reason) {
        assertThatThrownBy(() -> reg.acquire(id, key, writer, address, offset, length))
                .isInstanceOfSatisfying(RegionRegistry.Refusal.class, e -> {
                    assertThat(e.code()).isEqualTo(code);
                    assertThat(e.reason()).contains(reason);
                });
    }
}
