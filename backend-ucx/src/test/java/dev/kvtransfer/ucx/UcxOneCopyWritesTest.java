package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * When a UCX manager tells core that a peer's writes land with one copy ({@code oneCopyWritesFrom}, which turns a
 * pull between local instances into one-sided writes): only emulated writes in shared-memory mode with CMA, where the
 * owner reads each batch from the writer's memory with {@code process_vm_readv}.
 */
class UcxOneCopyWritesTest {
    @ParameterizedTest(name = "transports={0} cma={1} oneSided={2}: {3}")
    @CsvSource({
        "shm, true, auto, true",
        "shm, true, emulated, true",
        "shm, false, auto, false",
        "shm, true, native, false",
        "net, true, auto, false"})
    void onlyEmulatedWritesOverSharedMemoryWithCmaAreOneCopy(String transports, boolean cma, String oneSided,
                                                             boolean expected) {
        List<Throwable> errors = new ArrayList<>();
        try (ConnectionManager m = new UcxTransportProvider().create(TransportConfig.builder().name("one-copy")
                .defaultTimeout(Duration.ofSeconds(10)).property(UcxSettings.TRANSPORTS, transports)
                .property(UcxSettings.CMA, Boolean.toString(cma)).property(UcxSettings.ONE_SIDED, oneSided)
                .errorHandler(errors::add).build());
             ConnectionManager peer = new UcxTransportProvider().create(TransportConfig.builder().name("peer")
                .defaultTimeout(Duration.ofSeconds(10)).property(UcxSettings.TRANSPORTS, transports)
                .property(UcxSettings.CMA, Boolean.toString(cma)).property(UcxSettings.ONE_SIDED, oneSided)
                .errorHandler(errors::add).build())) {
            assertThat(m.oneCopyWritesFrom(peer.localAddress())).isEqualTo(expected);
            assertThat(((UcxConnectionManager) m).settings().oneCopyWrites()).isEqualTo(expected);
        }
        assertThat(errors).isEmpty();
    }
}
