package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.TransceiverConfig;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The journal options of {@code demo} (a picocli mixin): {@code --journal-dir DIR} journals every rank of both
 * instances under DIR; {@code --journal-checksums} adds a CRC32C of every part. They map onto the transceiver
 * properties {@code kvtransfer.journalDir} / {@code kvtransfer.journalChecksums}.
 */
public final class JournalOptions {
    /** Property of the journal directory (TransceiverConfig's name for it). */
    static final String P_JOURNAL_DIR = TransceiverConfig.PREFIX + "journalDir";
    /** Property switching part checksums on. */
    static final String P_JOURNAL_CHECKSUMS = TransceiverConfig.PREFIX + "journalChecksums";

    @Option(names = "--journal-dir", description = "journal every transfer event of every rank under this directory")
    Path journalDir;

    @Option(names = "--journal-checksums", description = "with --journal-dir: record a CRC32C of every part's payload")
    boolean journalChecksums;

    /** @return the transceiver properties these options set (empty when journaling is off) */
    public Map<String, String> properties() {
        Map<String, String> m = new LinkedHashMap<>();
        if (journalDir != null) {
            m.put(P_JOURNAL_DIR, journalDir.toAbsolutePath().toString());
            m.put(P_JOURNAL_CHECKSUMS, Boolean.toString(journalChecksums));
        }
        return m;
    }

    /** @return these options as arguments, for a child JVM */
    public List<String> toArgs() {
        List<String> a = new ArrayList<>();
        if (journalDir != null) {
            a.add("--journal-dir=" + journalDir.toAbsolutePath());
        }
        if (journalChecksums) {
            a.add("--journal-checksums");
        }
        return a;
    }
}
