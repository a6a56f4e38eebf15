package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Binary compatibility in practice: the transceiver suite (core's CacheTransceiver and the standard formatter of
 * today) over the tcp plugin as it was written against the oldest supported api ({@link OldestApiPlugin}, compiled
 * against the api baseline jar alone). Every rule moves real bytes and verifies every element, so a method added to
 * the api since then whose default does not serve an old plugin fails here.
 */
class OldestApiTcpTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return OldestApiPlugin.provider();
    }

    @Test
    void thePluginUnderTestIsTheFrozenOneCompiledAgainstTheBaselineApiAlone() throws Exception {
        OldestApiPlugin.Loaded loaded = OldestApiPlugin.load();
        assertThat(loaded.baseline().getFileName().toString()).startsWith("kvtransfer-api-").endsWith(".jar");
        assertThat(Files.isRegularFile(loaded.baseline())).isTrue();
        TransportProvider p = provider();
        assertThat(p.getClass().getClassLoader()).as("loaded from the frozen copy, not today's example")
                .isSameAs(loaded.loader());
        assertThat(p.getClass()).isNotSameAs(TcpTransportProvider.class);
        assertThat(p.name()).isEqualTo(new TcpTransportProvider().name());
        // The api types it uses are today's: one api in the JVM, as in a deployment's plugin directory.
        assertThat(TransportProvider.class.getClassLoader()).isNotSameAs(loaded.loader());
    }
}
