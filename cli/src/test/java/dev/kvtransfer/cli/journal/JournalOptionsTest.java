package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.TransceiverConfig;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The {@code --journal-dir} / {@code --journal-checksums} mixin as the demo uses it. */
class JournalOptionsTest {
    @Command(name = "holder")
    static final class Holder implements Runnable {
        @Mixin
        JournalOptions journal = new JournalOptions();

        @Override
        public void run() {
        }
    }

    @Test
    void optionsBecomeTransceiverPropertiesAndChildArguments() {
        Holder h = new Holder();
        new CommandLine(h).parseArgs("--journal-dir", "some/dir", "--journal-checksums");
        Map<String, String> props = new LinkedHashMap<>(h.journal.properties());
        props.put(TransceiverConfig.P_BACKEND, "loopback");
        TransceiverConfig c = TransceiverConfig.fromProperties(props);
        assertThat(c.journalDir()).contains(Path.of("some/dir").toAbsolutePath());
        assertThat(c.journalChecksums()).isTrue();
        Holder again = new Holder();
        new CommandLine(again).parseArgs(h.journal.toArgs().toArray(new String[0]));
        assertThat(again.journal.properties()).isEqualTo(h.journal.properties());
    }

    @Test
    void withoutADirectoryJournalingStaysOff() {
        Holder h = new Holder();
        new CommandLine(h).parseArgs();
        assertThat(h.journal.properties()).isEmpty();
        assertThat(h.journal.toArgs()).isEmpty();
        assertThat(TransceiverConfig.defaults().journalDir()).isEmpty();
        assertThat(TransceiverConfig.defaults().journalChecksums()).isFalse();
    }
}
