package dev.kvtransfer.api;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The engine classes that moved to formatter-support and transport-support stay in the api as frozen copies for
 * plugins built against an older api, each marked for removal since 0.3 (see the README's table).
 */
class DeprecatedEngineCopiesTest {
    @ParameterizedTest
    @ValueSource(strings = {"layout.PartPlan", "layout.WritePlan", "layout.PeerWriteSink", "layout.ChunkCrc",
            "transport.support.EmulatedOneSided", "transport.support.ControlMemory"})
    void eachFrozenCopyIsDeprecatedForRemovalSince03(String name) throws ClassNotFoundException {
        Deprecated d = Class.forName("dev.kvtransfer.api." + name).getAnnotation(Deprecated.class);
        assertThat(d).as(name).isNotNull();
        assertThat(d.forRemoval()).as(name).isTrue();
        assertThat(d.since()).as(name).isEqualTo("0.3");
    }
}
