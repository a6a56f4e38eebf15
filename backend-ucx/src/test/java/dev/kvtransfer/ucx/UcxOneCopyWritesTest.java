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
 * pull between local instances into one-sided writes): only with {@code ucx.vectoredWrites} (off by default) and
 * emulated writes in shared-memory mode with CMA, where the owner reads each batch from the writer's memory.
 */
class UcxOneCopyWritesTest {
    @ParameterizedTest(name = "transports={0} cma={1} oneSided={2} vectoredWrites={3}: {4}")
    @CsvSource({
        "shm, true, auto, false, false",
        "shm, true, auto, true, true",
        "shm, true, emulated, true, true",
        "shm, false, auto, true, false",
        "shm, true, native, true, false",
        "net, true, auto, true, false"})
    void onlyVectoredEmulatedWritesOverSharedMemoryWithCmaAreOneCopy(String transports, boolean cma, String oneSided,
                                                                     boolean vectored, boolean expected) {
        List<Throwable> errors = new ArrayList<>();
        try (ConnectionManager m = new UcxTransportProvider().create(TransportConfig.builder().name("one-copy")
                .defaultTimeout(Duration.ofSeconds(10)).property(UcxSettings.TRANSPORTS, transports)
                .property(UcxSettings.CMA, Boolean.toString(cma)).property(UcxSettings.ONE_SIDED, oneSided)
                .property(UcxSettings.VECTORED_WRITES, Boolean.toString(vectored)).errorHandler(errors::add).build());
             ConnectionManager peer = new UcxTransportProvider().create(TransportConfig.builder().name("peer")
                .defaultTimeout(Duration.ofSeconds(10)).property(UcxSettings.TRANSPORTS, transports)
                .property(UcxSettings.CMA, Boolean.toString(cma)).property(UcxSettings.ONE_SIDED, oneSided)
                .property(UcxSettings.VECTORED_WRITES, Boolean.toString(vectored)).errorHandler(errors::add).build())) {
            assertThat(m.oneCopyWritesFrom(peer.localAddress())).isEqualTo(expected);
            assertThat(((UcxConnectionManager) m).settings().oneCopyWrites()).isEqualTo(expected);
        }
        assertThat(errors).isEmpty();
    }
}
