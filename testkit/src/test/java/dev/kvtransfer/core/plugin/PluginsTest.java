package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.AttentionType;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class PluginsTest {
    private final Plugins plugins = Plugins.discover();

    @Test
    void discoversTheRegisteredProviders() {
        assertThat(plugins.transports()).extracting(p -> p.name()).contains("loopback", "nativeonly");
        assertThat(plugins.formatters()).extracting(p -> p.name()).contains("whole-block");
        assertThat(plugins.transport("loopback").name()).isEqualTo("loopback");
        assertThat(plugins.formatter("whole-block").name()).isEqualTo("whole-block");
        assertThat(plugins.formatterFor(AttentionType.DEFAULT).name()).isEqualTo("whole-block");
        assertThat(plugins.broken()).isEmpty();
    }

    @Test
    void anUnavailableTransportSaysWhyAndListsWhatWasFound() {
        assertThatThrownBy(() -> plugins.transport("nativeonly")).isInstanceOf(KvTransferException.class)
                .hasMessageContaining("transport 'nativeonly' is not available: libnative.so missing")
                .hasMessageContaining("found: loopback (available), nativeonly (unavailable: libnative.so missing)");
    }

    @Test
    void aMissingPluginListsWhatWasFound() {
        assertThatThrownBy(() -> plugins.transport("ucx"))
                .hasMessageContaining("no transport named 'ucx'; found: loopback (available)");
        assertThatThrownBy(() -> plugins.formatter("standard"))
                .hasMessageContaining("no formatter named 'standard'; found: whole-block (DEFAULT)");
        assertThatThrownBy(() -> plugins.formatterFor(AttentionType.MLA))
                .hasMessageContaining("no formatter installed for MLA attention; found: whole-block (DEFAULT)");
        assertThatThrownBy(() -> new Plugins(List.of(), List.of()).transport("aeron"))
                .hasMessageContaining("found: none");
    }
}
