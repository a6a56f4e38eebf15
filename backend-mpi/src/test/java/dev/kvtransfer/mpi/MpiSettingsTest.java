package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Every {@code mpi.*} property parsed once, validated at create (no MPI needed). */
class MpiSettingsTest {
    private static TransportConfig.Builder config() {
        return TransportConfig.builder().name("settings-test");
    }

    @Test
    void defaultsKeepTheContract() {
        MpiSettings s = MpiSettings.conclude(config().build());
        assertThat(s.chunkBytes()).isEqualTo(1 << 30);
        assertThat(s.eagerBytes()).isEqualTo(Connection.EAGER_LIMIT);
        assertThat(s.maxQueuedBytes()).isEqualTo(256L << 20);
        assertThat(s.maxQueuedMessages()).isEqualTo(1_000_000);
        assertThat(s.oneSided()).isEqualTo(MpiSettings.OneSided.NATIVE);
    }

    @Test
    void everyKnownKeyIsRead() {
        MpiSettings s = MpiSettings.conclude(config().property("mpi.maxMessageBytes", "4096")
                .property("mpi.eagerBytes", "131072").property("mpi.maxQueuedBytes", "2097152")
                .property("mpi.maxQueuedMessages", "100").property("mpi.oneSided", "EMULATED").build());
        assertThat(s.chunkBytes()).isEqualTo(4096);
        assertThat(s.eagerBytes()).isEqualTo(131072);
        assertThat(s.maxQueuedBytes()).isEqualTo(2 << 20);
        assertThat(s.maxQueuedMessages()).isEqualTo(100);
        assertThat(s.oneSided()).isEqualTo(MpiSettings.OneSided.EMULATED);
    }

    @Test
    void anUnknownMpiKeyIsRefusedNamingTheKnownOnes() {
        assertThatThrownBy(() -> MpiSettings.conclude(config().property("mpi.maxMesageBytes", "1").build()))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("unknown transport property mpi.maxMesageBytes = '1'; known: mpi.eagerBytes, "
                        + "mpi.maxMessageBytes, mpi.maxQueuedBytes, mpi.maxQueuedMessages, mpi.oneSided");
        // other prefixes are left to their transports
        MpiSettings.conclude(config().property("aeron.term", "1").build());
    }

    @Test
    void valuesOutOfRangeAreRefusedNamingKeyAndValue() {
        assertThatThrownBy(() -> MpiSettings.conclude(config().property("mpi.maxMessageBytes", "0").build()))
                .hasMessage("transport property mpi.maxMessageBytes = 0: must be in [1, 2147483647]");
        assertThatThrownBy(() -> MpiSettings.conclude(config().property("mpi.eagerBytes", "4096").build()))
                .hasMessage("transport property mpi.eagerBytes = 4096: must be in [65536, 16777216]");
        assertThatThrownBy(() -> MpiSettings.conclude(config().property("mpi.maxQueuedBytes", "x").build()))
                .hasMessage("transport property mpi.maxQueuedBytes = 'x': not an integer");
        assertThatThrownBy(() -> MpiSettings.conclude(config().property("mpi.oneSided", "rdma").build()))
                .hasMessage("transport property mpi.oneSided = 'rdma': must be native or emulated");
    }
}
