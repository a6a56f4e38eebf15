package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@code aeron.dirGroup} is checked at create (any uid; the file-mode proofs are in AeronSharedMemoryModeTest). */
class AeronDirGroupSettingTest {
    @Test
    void aBadGroupNameIsRefusedNamingTheKey() {
        assertThatThrownBy(() -> AeronSettings.from(TransportConfig.builder()
                .property(AeronSettings.DIR_GROUP, "a b;rm").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining(AeronSettings.DIR_GROUP)
                .hasMessageContaining("a b;rm");
    }

    @Test
    void anUnknownGroupIsRefusedNamingItAndLeavesNoDirectory() {
        assertThatThrownBy(() -> EmbeddedDriver.newDirectory("grouptest", "no-such-group-kvt"))
                .hasMessageContaining("no-such-group-kvt");
        String prefix = EmbeddedDriver.PREFIX + ProcessHandle.current().pid() + "-grouptest";
        for (String base : new String[] {"/dev/shm", System.getProperty("java.io.tmpdir")}) {
            String[] left = new java.io.File(base).list((d, n) -> n.startsWith(prefix));
            org.assertj.core.api.Assertions.assertThat(left == null ? new String[0] : left).as(base).isEmpty();
        }
    }
}
