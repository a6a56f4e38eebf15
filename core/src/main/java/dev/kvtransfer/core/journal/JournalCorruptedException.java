package dev.kvtransfer.core.journal;

import java.nio.file.Path;

/**
 * A journal queue file that cannot be read as written: truncated, emptied, overwritten, or failing a
 * memory-mapped read. Names the file; the reader never returns a result that silently lacks its rank.
 */
public final class JournalCorruptedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final transient Path file;

    /**
     * @param file  the damaged file (or queue directory)
     * @param why   what was wrong
     * @param cause the underlying failure, or null
     */
    public JournalCorruptedException(Path file, String why, Throwable cause) {
        super("journal file " + file + " is damaged: " + why, cause);
        this.file = file;
    }

    /** @return the damaged file or queue directory */
    public Path file() {
        return file;
    }
}
