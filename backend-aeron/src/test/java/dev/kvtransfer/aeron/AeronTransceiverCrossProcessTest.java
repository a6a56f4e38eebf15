package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.TransceiverCrossProcessTest;

import java.util.Map;

/**
 * The testkit's cross-process transceiver rules over Aeron UDP on loopback (the context instance in a child JVM).
 * A silent peer fails calls with PEER_LOST after 2 s here, so the kill rule ends quickly.
 */
class AeronTransceiverCrossProcessTest extends TransceiverCrossProcessTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected Map<String, String> transportProperties() {
        return emulated ? Map.of(AeronSettings.PEER_TIMEOUT_MS, "2000", AeronSettings.SHARED_MEMORY_WRITES, "false")
                : Map.of(AeronSettings.PEER_TIMEOUT_MS, "2000");
    }

    /**
     * The context process killed with -9 mid-push: both processes share the deployment secret and the generation
     * pools lie in shared files, so the child copies straight into them (one copy); the request fails in bound, the
     * grants it held are revoked although the writer died inside a copy, and a fresh context's request is pushed
     * byte-exact, again through shared memory.
     */
    @org.junit.jupiter.api.Test
    void contextKilledMidPushFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        long granted = ShmOwner.granted();
        killedContext(TransceiverConfig.TransferMode.PUSH, 7100);
        // At least one grant to the killed child and one to the fresh one.
        org.assertj.core.api.Assertions.assertThat(ShmOwner.granted() - granted)
                .as("shared-memory grants handed to the context children").isGreaterThanOrEqualTo(2);
    }

    /** The same with one-copy writes turned off: emulated one-sided writes. */
    @org.junit.jupiter.api.Test
    void contextKilledMidEmulatedPushFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        emulated = true;
        long granted = ShmOwner.granted();
        killedContext(TransceiverConfig.TransferMode.PUSH, 7200);
        org.assertj.core.api.Assertions.assertThat(ShmOwner.granted() - granted).isZero();
    }

    /**
     * The suite's pull kill rule: both processes are on this host with the deployment secret, so the pull moves as
     * one-copy writes from the child into the generation pool; the same outcome is required, and the grants show
     * that path was taken (the killed child's and the fresh one's).
     */
    @Override
    @org.junit.jupiter.api.Test
    public void required_spec3_14_killedContextProcessFailsTheRequestInFlightAndAFreshOneIsServed() throws Exception {
        long granted = ShmOwner.granted();
        killedContext(TransceiverConfig.TransferMode.PULL, 7000);
        org.assertj.core.api.Assertions.assertThat(ShmOwner.granted() - granted)
                .as("shared-memory grants handed to the context children of a local pull").isGreaterThanOrEqualTo(2);
    }

    /** The pull kill rule with one-copy writes off: a two-sided pull over the transport's messages. */
    @org.junit.jupiter.api.Test
    void contextKilledMidTwoSidedPullFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        emulated = true;
        long granted = ShmOwner.granted();
        killedContext(TransceiverConfig.TransferMode.PULL, 7300);
        org.assertj.core.api.Assertions.assertThat(ShmOwner.granted() - granted).isZero();
    }

    private boolean emulated;
}
