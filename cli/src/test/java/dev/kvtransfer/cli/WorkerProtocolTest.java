package dev.kvtransfer.cli;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The demo reads its generation worker's replies from the worker's stdout, where UCX also printed its log lines: a
 * UCX error there ("Message truncated" when a receiver discards an abandoned send) was taken for a reply and ended
 * the demo with "unexpected reply from the generation worker". Log lines now pass through to stderr.
 */
class WorkerProtocolTest {
    @Test
    void aUcxLogLineIsNotAReplyAndNoReplyLooksLikeOne() {
        assertThat(WorkerProtocol.nativeLogLine("[1796522710.566562] [vm:7262 :0] jucx_common_def.cc:257 UCX ERROR "
                + "JUCX: request error: Message truncated")).isTrue();
        for (String reply : new String[] {WorkerProtocol.READY, WorkerProtocol.PREPARED + " 7 1 2",
                WorkerProtocol.DONE + " 7 1 0 0 0 0 0 0 1 x", WorkerProtocol.CHECKED + " 7 1 2 3",
                WorkerProtocol.SYNCED + " 0 4", WorkerProtocol.BYE, "EOF: generation worker exited with status 0"}) {
            assertThat(WorkerProtocol.nativeLogLine(reply)).as(reply).isFalse();
        }
    }
}
