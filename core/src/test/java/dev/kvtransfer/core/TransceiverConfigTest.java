package dev.kvtransfer.core;

import dev.kvtransfer.api.layout.BlockLayout;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class TransceiverConfigTest {
    @Test
    void defaultsAreTheDocumentedConstants() {
        TransceiverConfig c = TransceiverConfig.defaults();
        assertThat(c.backend()).isEqualTo(TransceiverConfig.DEFAULT_BACKEND);
        assertThat(c.formatter()).isEmpty();
        assertThat(c.transferBufferBytes()).isEqualTo(64L << 20);
        assertThat(c.sendConcurrency()).isEqualTo(TransceiverConfig.DEFAULT_SEND_CONCURRENCY);
        assertThat(c.responderInfoWaitMicros()).isEqualTo(TransceiverConfig.RESPONDER_INFO_WAIT_TRANSPORT);
        assertThat(c.kvTransferTimeout()).isEqualTo(Duration.ofSeconds(60));
        assertThat(c.timingDir()).isEmpty();
        assertThat(c.localOneCopyMinBytes()).isEqualTo(1L << 20);
    }

    @Test
    void readsEveryPropertyAndRoundTrips() {
        Map<String, String> p = Map.ofEntries(
                Map.entry(TransceiverConfig.P_BACKEND, "loopback"),
                Map.entry(TransceiverConfig.P_FORMATTER, "standard"),
                Map.entry(TransceiverConfig.P_TRANSFER_BUFFER_BYTES, "16MB"),
                Map.entry(TransceiverConfig.P_MAX_TOKENS_IN_BUFFER, "64"),
                Map.entry(TransceiverConfig.P_SEND_CONCURRENCY, "4"),
                Map.entry(TransceiverConfig.P_RESPONDER_INFO_WAIT_MICROS, "0"),
                Map.entry(TransceiverConfig.P_RECV_SLOTS, "3"),
                Map.entry(TransceiverConfig.P_PARALLEL_RECEIVE, "true"),
                Map.entry(TransceiverConfig.P_ALLOW_DYNAMIC_BUFFERS, "false"),
                Map.entry(TransceiverConfig.P_CHUNK_BYTES, "1 KiB"),
                Map.entry(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, "1500"),
                Map.entry(TransceiverConfig.P_SENDER_FUTURE_TIMEOUT_MS, "20"),
                Map.entry(TransceiverConfig.P_TIMING_DIR, "/tmp/t"),
                Map.entry(TransceiverConfig.P_REQUEST_THREADS_PER_PEER_INSTANCE, "2"),
                Map.entry(TransceiverConfig.P_MAX_PENDING_REQUESTS, "100"),
                Map.entry(TransceiverConfig.P_LOCAL_ONE_COPY_MIN_BYTES, "64K"),
                Map.entry("unrelated.key", "ignored"));
        TransceiverConfig c = TransceiverConfig.fromProperties(p);
        assertThat(c.backend()).isEqualTo("loopback");
        assertThat(c.formatter()).contains("standard");
        assertThat(c.transferBufferBytes()).isEqualTo(16L << 20);
        assertThat(c.maxTokensInBuffer()).isEqualTo(64);
        assertThat(c.sendConcurrency()).isEqualTo(4);
        assertThat(c.responderInfoWaitMicros()).isZero();
        assertThat(c.recvSlots()).isEqualTo(3);
        assertThat(c.parallelReceive()).isTrue();
        assertThat(c.allowDynamicBuffers()).isFalse();
        assertThat(c.chunkBytes()).isEqualTo(1024);
        assertThat(c.kvTransferTimeout()).isEqualTo(Duration.ofMillis(1500));
        assertThat(c.senderFutureTimeout()).isEqualTo(Duration.ofMillis(20));
        assertThat(c.timingDir()).contains(Path.of("/tmp/t"));
        assertThat(c.requestThreadsPerPeerInstance()).isEqualTo(2);
        assertThat(c.maxPendingRequests()).isEqualTo(100);
        assertThat(c.localOneCopyMinBytes()).isEqualTo(64 << 10);
        assertThat(TransceiverConfig.fromProperties(c.toProperties())).isEqualTo(c);
    }

    @Test
    void rejectsBadValuesNamingKeyAndValue() {
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of(TransceiverConfig.P_SEND_CONCURRENCY, "0")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("kvtransfer.sendConcurrency = 0");
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(
                Map.of(TransceiverConfig.P_RESPONDER_INFO_WAIT_MICROS, "-2")))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("kvtransfer.responderInfoWaitMicros = -2");
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of(TransceiverConfig.P_CHUNK_BYTES, "lots")))
                .hasMessageContaining("kvtransfer.chunkBytes = 'lots'");
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of(TransceiverConfig.P_PARALLEL_RECEIVE,
                "yes"))).hasMessageContaining("kvtransfer.parallelReceive = 'yes'");
        // Removed (nothing read it): refused like any unknown key, so a stale setting is noticed.
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of("kvtransfer.zeroCopy", "true")))
                .hasMessageContaining("unknown property kvtransfer.zeroCopy");
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS,
                "-1"))).hasMessageContaining("kvtransfer.kvTransferTimeoutMs = -1");
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(Map.of("kvtransfer.sendConcurency", "2")))
                .hasMessageContaining("unknown property kvtransfer.sendConcurency")
                .hasMessageContaining(TransceiverConfig.P_SEND_CONCURRENCY);
        assertThatThrownBy(() -> TransceiverConfig.fromProperties(
                Map.of(TransceiverConfig.P_LOCAL_ONE_COPY_MIN_BYTES, "-1")))
                .hasMessageContaining("kvtransfer.localOneCopyMinBytes = '-1'");
        assertThatThrownBy(() -> TransceiverConfig.builder().localOneCopyMinBytes(-1).build())
                .hasMessageContaining("kvtransfer.localOneCopyMinBytes = -1");
        assertThatThrownBy(() -> TransceiverConfig.builder().transferBufferBytes(0).allowDynamicBuffers(false)
                .build()).hasMessageContaining("no staging memory");
    }

    @Test
    void slotBytesFollowMaxTokensInBufferWhenSet() {
        BlockLayout layout = new BlockLayout(2, 2, 4, 16, 8, 2); // 2*2*4*16*8*2 = 4096 bytes per block
        assertThat(TransceiverConfig.builder().transferBufferBytes(1000).build().slotBytes(layout)).isEqualTo(1000);
        // (64 + 16) tokens * 256 bytes per token
        assertThat(TransceiverConfig.builder().maxTokensInBuffer(64).build().slotBytes(layout)).isEqualTo(80 * 256);
        assertThatThrownBy(() -> TransceiverConfig.builder().maxTokensInBuffer(10).build().slotBytes(layout))
                .hasMessageContaining("multiple of tokensPerBlock 16");
    }
}
