package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Properties and addresses of the tcp plugin. */
class TcpSettingsTest {
    @Test
    void defaultsAndOverrides() {
        TcpSettings d = TcpSettings.of(TransportConfig.builder().build());
        assertThat(d.connectTimeout()).isEqualTo(Duration.ofSeconds(10));
        assertThat(d.socketBuffer()).isEqualTo(4 << 20);
        TcpSettings s = TcpSettings.of(TransportConfig.builder().property(TcpSettings.CONNECT_TIMEOUT_MS, "250")
                .property(TcpSettings.SOCKET_BUFFER_BYTES, "0").property("aeron.other", "x").build());
        assertThat(s.connectTimeout()).isEqualTo(Duration.ofMillis(250));
        assertThat(s.socketBuffer()).isZero();
    }

    @Test
    void badValuesAndUnknownKeysAreRefusedNamingTheKey() {
        assertThatThrownBy(() -> TcpSettings.of(TransportConfig.builder().property("tcp.nodelay", "1").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("tcp.nodelay")
                .hasMessageContaining("known: tcp.connectTimeoutMillis");
        assertThatThrownBy(() -> TcpSettings.of(TransportConfig.builder()
                .property(TcpSettings.MAX_MESSAGE_BYTES, "-1").build()))
                .hasMessageContaining(TcpSettings.MAX_MESSAGE_BYTES);
    }

    @Test
    void addressesRoundTripAndBadOnesAreNamed() {
        assertThat(TcpAddress.parse(TcpAddress.format("127.0.0.1", 4000)).getPort()).isEqualTo(4000);
        assertThat(TcpAddress.format("::1", 5)).isEqualTo("tcp://[::1]:5");
        assertThat(TcpAddress.parse("tcp://[::1]:5").getAddress().isLoopbackAddress()).isTrue();
        assertThatThrownBy(() -> TcpAddress.parse("127.0.0.1:4000")).hasMessageContaining("'127.0.0.1:4000'");
        assertThatThrownBy(() -> TcpAddress.parse("tcp://h:0")).hasMessageContaining("port");
    }
}
