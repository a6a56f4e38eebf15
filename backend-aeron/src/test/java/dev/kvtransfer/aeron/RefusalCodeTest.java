package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What a sender is told when a peer refused its stream. A peer that timed our session out (we were stopped past its
 * peer timeout and resumed mid-stream) no longer knows us: that is a lost peer, as for every other fault that ends a
 * session, not a network error.
 */
class RefusalCodeTest {
    @Test
    void aStreamResumedMidStreamIsALostPeer() {
        String reason = TransportAgent.REJECT_MALFORMED + "its first message is not a HELLO (1056 B, DATA): "
                + TransportAgent.MID_STREAM + " or is not this transport";
        assertThat(TransportAgent.refusalCode(reason)).isEqualTo(ErrorCode.PEER_LOST);
    }

    @Test
    void aWrongSecretIsUnauthorizedAndAnyOtherRefusalANetworkError() {
        assertThat(TransportAgent.refusalCode(TransportAgent.REJECT_UNAUTHORIZED + "HELLO from 10.0.0.2:40123 "
                + "fails its MAC")).isEqualTo(ErrorCode.UNAUTHORIZED);
        assertThat(TransportAgent.refusalCode(TransportAgent.REJECT_MALFORMED + "HELLO frame of 40 B declares a body "
                + "of 90 B")).isEqualTo(ErrorCode.NETWORK);
    }
}
