package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/** The handshake with a deployment secret: holders talk, a wrong or missing secret is refused and reported. */
class TcpAuthenticationTest {
    private static final byte[] SECRET = "0123456789abcdef-secret".getBytes(StandardCharsets.UTF_8);
    private static final byte[] OTHER = "fedcba9876543210-secret".getBytes(StandardCharsets.UTF_8);
    private final dev.kvtransfer.transport.support.ControlMemory memory =
            new dev.kvtransfer.transport.support.ControlMemory("tcp");

    private static ConnectionManager manager(byte[] secret, List<Throwable> errors) {
        return new TcpTransportProvider().create(TransportConfig.builder().name("auth").authSecret(secret)
                .defaultTimeout(Duration.ofSeconds(5)).property(TcpSettings.CONNECT_TIMEOUT_MS, "1000")
                .errorHandler(errors::add).build());
    }

    @Test
    void holdersOfTheSecretExchangeMessages() {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        try (ConnectionManager a = manager(SECRET, errors); ConnectionManager b = manager(SECRET, errors)) {
            MemoryBuffer src = memory.allocate(8, MemoryKind.HOST);
            src.asByteBuffer().putLong(0, 42);
            MemoryBuffer dst = memory.allocate(8, MemoryKind.HOST);
            a.connection(b.localAddress()).send(7, src, 0, 8);
            b.connection(a.localAddress()).recv(7, dst, 0, 8, Duration.ofSeconds(5));
            assertThat(dst.asByteBuffer().getLong(0)).isEqualTo(42);
            assertThat(errors).isEmpty();
        }
    }

    @Test
    void aWrongOrMissingSecretIsRefusedAndTheOwnerReportsIt() {
        List<Throwable> ownerErrors = new CopyOnWriteArrayList<>();
        List<Throwable> none = new CopyOnWriteArrayList<>();
        try (ConnectionManager owner = manager(SECRET, ownerErrors);
             ConnectionManager wrong = manager(OTHER, none);
             ConnectionManager missing = manager(null, none)) {
            MemoryBuffer src = memory.allocate(8, MemoryKind.HOST);
            for (ConnectionManager intruder : List.of(wrong, missing)) {
                assertThatThrownBy(() -> intruder.connection(owner.localAddress()).send(7, src, 0, 8))
                        .isInstanceOfSatisfying(TransportException.class,
                                e -> assertThat(e.code()).isEqualTo(ErrorCode.UNAUTHORIZED))
                        .hasMessageContaining("refused by the peer: hello without a valid HMAC");
            }
            await().atMost(Duration.ofSeconds(10)).until(() -> ownerErrors.size() >= 2);
            assertThat(ownerErrors).allSatisfy(e -> assertThat(e).hasMessageContaining("HMAC"));
            // And an owner without a secret cannot pass for one that has it.
            assertThatThrownBy(() -> owner.connection(missing.localAddress()).send(7, src, 0, 8))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.UNAUTHORIZED))
                    .hasMessageContaining("no valid HMAC");
        }
    }
}
