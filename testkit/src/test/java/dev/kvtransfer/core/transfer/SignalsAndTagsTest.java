package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.HashSet;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

class SignalsAndTagsTest {
    @Test
    void aRefusalCarriesItsCodeAndReasonToTheRequester() {
        LoopbackTransportProvider t = new LoopbackTransportProvider();
        try (HostBufferManager bm = new HostBufferManager();
             ConnectionManager ctx = t.create(TransportConfig.builder().build());
             ConnectionManager gen = t.create(TransportConfig.builder().build())) {
            int tag = Tags.FIRST_DATA_TAG + 5;
            Signals.sendReason(bm, ctx.connection(gen.localAddress()), tag, ErrorCode.UNSUPPORTED_LAYOUT,
                    "dataType: self FLOAT16, peer FLOAT32 — ünïcode ok", Duration.ofSeconds(5));
            {
                var conn = gen.connection(ctx.localAddress());
                KvTransferException e = Signals.readRefusal(bm, conn, tag, Duration.ofSeconds(5), 77);
                assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                assertThat(e.requestId()).isEqualTo(77);
                assertThat(e.getMessage()).contains("dataType: self FLOAT16, peer FLOAT32 — ünïcode ok")
                        .contains(ctx.localAddress());
            }
        }
    }

    @Test
    void aLongPeerSuppliedReasonIsCutAndControlCharactersReplaced() {
        String huge = "x".repeat(1_000_000);
        assertThat(Texts.peer(huge)).hasSizeLessThan(Texts.MAX_CHARS + 32).endsWith("(1000000 chars)");
        assertThat(Texts.reason("line\nforged log line")).isEqualTo("line?forged log line");
    }

    @Test
    void dataTagsStartAnywhereAndStayAtOrAboveTheFirstDataTag() {
        for (long start : new long[] {-1, Integer.MAX_VALUE, Long.MIN_VALUE, 123456789L}) {
            DataTags tags = new DataTags(start);
            for (int i = 0; i < 100; i++) {
                assertThat(tags.acquire()).isGreaterThanOrEqualTo(Tags.FIRST_DATA_TAG);
            }
        }
    }

    @Test
    void dataTagsAreUniqueWhileHeldAndNeverBelowTheFirstDataTag() {
        DataTags tags = new DataTags();
        Set<Integer> held = new HashSet<>();
        for (int i = 0; i < 10_000; i++) {
            int tag = tags.acquire();
            assertThat(tag).isGreaterThanOrEqualTo(Tags.FIRST_DATA_TAG);
            assertThat(held.add(tag)).isTrue();
        }
        assertThat(tags.inUse()).isEqualTo(10_000);
        int first = held.iterator().next();
        tags.release(first);
        // A released tag is not handed out again right away: the counter moves on.
        assertThat(tags.acquire()).isNotEqualTo(first);
    }
}
