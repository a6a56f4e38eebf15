package dev.kvtransfer.aeron;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.fuzz.Contract;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Aeron backend's own decoding of what arrives on its UDP subscription from any sender (the shared driver's
 * IPC carries only what local peers publish): the HELLO that opens every stream ({@code Handshake.verify}, with
 * and without a deployment secret) and the addresses it names ({@code Address.parse}). Verify never throws: a
 * bad HELLO is a refusal with its reason. With a secret nothing the fuzzer writes is accepted (it does not hold
 * the secret); without one, an accepted HELLO names a sender of at most the address bound.
 */
class AeronHandshakeFuzzTest {
    private static final String SELF = Address.format("127.0.0.1", 40123, 0x1a2b3c4d5e6f7081L, null, 0);
    private static final Handshake OPEN = new Handshake(null, 60_000);
    private static final Handshake SIGNED = new Handshake(
            "fuzzing secret of thirty-two b..".getBytes(StandardCharsets.US_ASCII), 60_000);

    @FuzzTest(maxDuration = "10m")
    void hello(byte[] data) {
        int at = data.length == 0 ? 0 : data[0] & 7;
        UnsafeBuffer b = new UnsafeBuffer(new byte[at + data.length + 8]);
        b.putBytes(at, data);
        for (Handshake h : new Handshake[] {OPEN, SIGNED}) {
            Handshake.Result[] r = new Handshake.Result[1];
            assertThat(Contract.only(data.length, () -> r[0] = h.verify(b, at, data.length, SELF))).isNull();
            if (r[0].refusal == null) {
                assertThat(h.authenticates()).as("accepted only without a secret").isFalse();
                assertThat(r[0].sender.getBytes(StandardCharsets.UTF_8).length)
                        .isBetween(1, AeronSettings.MAX_ADDRESS_BYTES);
            } else {
                assertThat(r[0].refusal).isNotBlank();
            }
        }
    }

    @FuzzTest(maxDuration = "10m")
    void address(byte[] data) {
        String text = new String(data, StandardCharsets.UTF_8);
        Address[] a = new Address[1];
        if (Contract.only(data.length, () -> a[0] = Address.parse(text), IllegalArgumentException.class) == null) {
            assertThat(a[0].port()).isBetween(1, 65535);
            assertThat(Address.hostPortOf(text)).isEqualTo(a[0].hostPort());
        }
    }
}
