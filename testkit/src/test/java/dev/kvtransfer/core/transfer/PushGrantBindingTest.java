package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A request's push grants take writes only from its counterparts, because a grant's key is no secret among insiders. An
 * insider that learnt a grant's descriptor (its key travels in the request info) wrote 212,992 bytes into another
 * request's blocks from an unrelated connection; now that write is refused {@code UNAUTHORIZED} with no byte changed,
 * and the counterpart's write into the same grant lands.
 */
class PushGrantBindingTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(16)
            .tokensPerBlock(8).build();

    private static ConnectionManager manager(String name) {
        return new LoopbackTransportProvider().create(TransportConfig.builder().name(name)
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "grant-binding").build());
    }

    @Test
    void anUnrelatedPeerWithTheGrantsDescriptorIsRefusedAndTheCounterpartsWriteLands() {
        try (HostBufferManager bm = new HostBufferManager();
             PagedKvCache gen = PagedKvCache.of(bm, STATE, 0, 8);
             ConnectionManager genRank = manager("gen");
             ConnectionManager ctxRank = manager("ctx");
             ConnectionManager insider = manager("insider")) {
            int[] ids = gen.allocate(900, 3);
            List<RegisteredRegion> regs = new ArrayList<>();
            Map<Long, MemoryBuffer> granted = new HashMap<>();
            List<PeerPool.Grant> grants = PushGrants.register(gen, genRank, ids, 0, 0,
                    Set.of(ctxRank.localAddress()), regs, granted);
            assertThat(grants).isNotEmpty();
            long grantedBytes = 0;
            for (PeerPool.Grant g : grants) {
                MemoryBuffer m = granted.get(g.descriptor().regionId());
                grantedBytes += m.size();
                ByteBuffer b = m.asByteBuffer();
                for (int i = 0; i < b.capacity(); i++) {
                    b.put(i, (byte) 0x5c);
                }
            }
            try (MemoryBuffer src = bm.allocate(grantedBytes, MemoryKind.HOST)) {
                ByteBuffer s = src.asByteBuffer();
                for (int i = 0; i < s.capacity(); i++) {
                    s.put(i, (byte) (i * 31 + 7));
                }
                for (PeerPool.Grant g : grants) {
                    long len = g.descriptor().length();
                    WriteBatch stolen = new WriteBatch().add(src, 0, g.descriptor(), 0, len);
                    assertThatThrownBy(() -> insider.connection(genRank.localAddress()).write(stolen,
                            Duration.ofSeconds(20)))
                            .isInstanceOfSatisfying(TransportException.class, e -> {
                                assertThat(e.code()).isEqualTo(ErrorCode.UNAUTHORIZED);
                                assertThat(e.getMessage()).contains("granted to other peers");
                            });
                }
                for (PeerPool.Grant g : grants) {
                    ByteBuffer b = granted.get(g.descriptor().regionId()).asByteBuffer();
                    for (int i = 0; i < b.capacity(); i++) {
                        assertThat(b.get(i)).as("grant #%d byte %d after the insider's write",
                                g.descriptor().regionId(), i).isEqualTo((byte) 0x5c);
                    }
                }
                long at = 0;
                for (PeerPool.Grant g : grants) {
                    long len = g.descriptor().length();
                    ctxRank.connection(genRank.localAddress()).write(new WriteBatch().add(src, at, g.descriptor(),
                            0, len), Duration.ofSeconds(20));
                    ByteBuffer b = granted.get(g.descriptor().regionId()).asByteBuffer();
                    for (int i = 0; i < len; i++) {
                        assertThat(b.get(i)).isEqualTo(s.get((int) (at + i)));
                    }
                    at += len;
                }
            } finally {
                regs.forEach(RegisteredRegion::close);
                gen.free(900);
            }
        }
    }
}
