package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Binary compatibility in practice: today's transport suite over the tcp plugin as it was written against the oldest
 * supported api ({@link OldestApiPlugin}, compiled against the api baseline jar alone). Every rule moves real bytes
 * and checks each one, so an api method added since whose default does not serve an old plugin fails here: the
 * posted-receive rules call {@code Connection.recvAsync} and the one-sided rules {@code register(memory, writers)},
 * both added after the plugin was written and reaching it through their defaults.
 *
 * <p>Clauses added after the plugin was written are not imposed on it: the two below, which this copy does not meet
 * (a receive or poll that gives up while its message is being read drops the message; today's example keeps it), are
 * overridden without {@code @Test}, so they do not run. Today's core relies on them (it receives request infos with
 * waits of microseconds), which is why a plugin of that age must be updated to pass them before it serves today's
 * core: the transceiver suite over this copy hung once in two runs on a lost request header.
 */
class OldestApiTcpTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return OldestApiPlugin.provider();
    }

    /** Added after the plugin was written (see the class comment): not run here. */
    @Override
    public void required_spec1_26_pollConnectWhoseWaitEndsNeverLosesAMessage() {
    }

    /** Added after the plugin was written (see the class comment): not run here. */
    @Override
    public void required_spec1_27_recvWhoseDeadlineEndsNeverLosesAMessage() {
    }

    /** The registration is the frozen plugin's own services file, found through its own class loader. */
    @Override
    @Test
    public void required_spec1_21_providerIsFoundThroughServiceLoader() {
        Thread t = Thread.currentThread();
        ClassLoader before = t.getContextClassLoader();
        t.setContextClassLoader(OldestApiPlugin.load().loader());
        try {
            super.required_spec1_21_providerIsFoundThroughServiceLoader();
        } finally {
            t.setContextClassLoader(before);
        }
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
