package dev.kvtransfer.cli;

import java.nio.charset.StandardCharsets;
import java.util.Base64;

/**
 * The line protocol between the demo (parent) and its generation worker (child JVM), on the child's stdin
 * and stdout. Everything the child logs goes to stderr.
 *
 * <pre>
 * child  : READY
 * parent : PREP index requestId isl
 * child  : PREPARED requestId base64(error, empty when the blocks are allocated)
 * parent : REQ index requestId isl base64(ContextPhaseParams)
 * child  : DONE requestId ok(0|1) bytes submitNanos doneNanos messages reusedBlocks skippedBytes pushed(0|1) base64(error)
 * parent : CHECK requestId
 * child  : CHECKED requestId checked mismatches base64(firstMismatch)
 * parent : SYNC
 * child  : SYNCED completed failed
 * parent : QUIT
 * child  : BYE
 * </pre>
 * Nanosecond stamps are {@code System.nanoTime()}, which on Linux reads CLOCK_MONOTONIC and is comparable
 * between processes of one machine.
 */
final class WorkerProtocol {
    static final String READY = "READY";
    static final String PREP = "PREP";
    static final String PREPARED = "PREPARED";
    static final String REQ = "REQ";
    static final String DONE = "DONE";
    static final String CHECK = "CHECK";
    static final String CHECKED = "CHECKED";
    static final String SYNC = "SYNC";
    static final String SYNCED = "SYNCED";
    static final String QUIT = "QUIT";
    static final String BYE = "BYE";

    /**
     * Whether a line on the worker's stdout is a native library's log line rather than a reply: UCX prints
     * {@code [seconds.micros] [host:pid:thread] file:line UCX LEVEL message} there unless {@code UCX_LOG_FILE} sends it
     * elsewhere (the demo sets it to stderr). Every reply starts with one of the words above.
     *
     * @param line a line the worker printed
     * @return whether it is a log line to pass through, not a reply
     */
    static boolean nativeLogLine(String line) {
        return line.startsWith("[");
    }

    private WorkerProtocol() {
    }

    static String b64(String s) {
        return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    static String unb64(String s) {
        return new String(Base64.getDecoder().decode(s), StandardCharsets.UTF_8);
    }
}
