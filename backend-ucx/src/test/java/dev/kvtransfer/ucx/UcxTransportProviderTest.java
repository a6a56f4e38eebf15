package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.Test;

import java.net.URL;
import java.net.URLClassLoader;
import java.util.ServiceLoader;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Discovery, availability and the report of a missing libucp / jucx. */
class UcxTransportProviderTest {
    @Test
    void serviceLoaderFindsTheProviderAndItIsAvailableHere() {
        TransportProvider p = ServiceLoader.load(TransportProvider.class).stream().map(ServiceLoader.Provider::get)
                .filter(x -> x.name().equals("ucx")).findFirst().orElseThrow();
        assertThat(p).isInstanceOf(UcxTransportProvider.class);
        assertThat(p.isAvailable()).as("libucx0 is installed here: %s", p.unavailabilityCause()).isTrue();
        assertThat(p.unavailabilityCause()).isNull();
        assertThat(p.capabilities()).contains(TransportCapability.CROSS_PROCESS,
                TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.AUTHENTICATED);
    }

    @Test
    void missingLibucpIsReportedNotThrown() {
        UcxTransportProvider p = new UcxTransportProvider(() -> UcxTransportProvider.probeWith(() -> {
            throw new UnsatisfiedLinkError("/tmp/jucx/libjucx.so: libucp.so.0: cannot open shared object file");
        }));
        assertThat(p.isAvailable()).isFalse();
        assertThat(p.unavailabilityCause()).contains("libucp").contains("libucx0");
        assertThat(p.capabilities()).doesNotContain(TransportCapability.DEVICE_MEMORY);
        assertThatThrownBy(() -> p.create(TransportConfig.builder().build()))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.NETWORK))
                .hasMessageContaining("libucp");
    }

    @Test
    void failedStaticInitialiserIsReportedNotThrown() {
        UcxTransportProvider p = new UcxTransportProvider(() -> UcxTransportProvider.probeWith(() -> {
            throw new ExceptionInInitializerError(new IllegalStateException("UCP API version is incompatible"));
        }));
        assertThat(p.isAvailable()).isFalse();
        assertThat(p.unavailabilityCause()).contains("UCP API version is incompatible");
    }

    @Test
    void providerLoadsAndReportsWithoutJucxOnTheClassPath() throws Exception {
        URL ours = UcxTransportProvider.class.getProtectionDomain().getCodeSource().getLocation();
        URL api = TransportProvider.class.getProtectionDomain().getCodeSource().getLocation();
        try (URLClassLoader noJucx = new URLClassLoader(new URL[] {ours, api},
                ClassLoader.getPlatformClassLoader())) {
            Class<?> c = Class.forName(UcxTransportProvider.class.getName(), true, noJucx);
            Object p = c.getConstructor().newInstance();
            assertThat(c.getMethod("name").invoke(p)).isEqualTo("ucx");
            assertThat(c.getMethod("isAvailable").invoke(p)).isEqualTo(false);
            assertThat((String) c.getMethod("unavailabilityCause").invoke(p)).contains("org/openucx/jucx");
        }
    }
}
