package dev.kvtransfer.api.model;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.fuzz.Contract;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The api's versioned wire formats, as a peer sends them: {@code RequestInfo} (the info frame's body, from the
 * generation side), {@code CacheState} (its wire codec {@code CacheStateWire}, also inside every registry record),
 * {@code CommState}, {@code TransceiverState} and {@code ContextPhaseParams} (the base64 params a router hands a
 * generation instance). Each decodes or throws {@code MalformedMessageException}; what decodes re-encodes to a
 * message that decodes to an equal object (nothing is accepted that this side could not have written).
 */
class ApiWireFuzzTest {
    private static <T> void roundTrip(byte[] data, Function<byte[], T> decode, Function<T, byte[]> encode) {
        Object[] out = new Object[1];
        KvTransferException e = Contract.malformedOnly(data.length, () -> out[0] = decode.apply(data));
        if (e == null) {
            @SuppressWarnings("unchecked")
            T decoded = (T) out[0];
            byte[] again = encode.apply(decoded);
            assertThat(decode.apply(again)).as("re-encoded").isEqualTo(decoded);
        }
    }

    @FuzzTest(maxDuration = "10m")
    void requestInfo(byte[] data) {
        roundTrip(data, RequestInfo::fromBytes, RequestInfo::toBytes);
    }

    /** The zero-copy decode where a transport received the frame: same answer as the array decode. */
    @FuzzTest(maxDuration = "10m")
    void requestInfoInPlace(byte[] data) {
        int at = data.length == 0 ? 0 : data[0] & 0x1f;
        ByteBuffer b = ByteBuffer.allocateDirect(at + data.length + 7);
        b.put(at, data).position(3).limit(b.capacity() - 2);
        RequestInfo[] viaBuffer = new RequestInfo[1];
        KvTransferException e1 = Contract.malformedOnly(data.length,
                () -> viaBuffer[0] = RequestInfo.fromBytes(b, at, data.length));
        assertThat(b.position()).as("position kept").isEqualTo(3);
        assertThat(b.limit()).as("limit kept").isEqualTo(b.capacity() - 2);
        RequestInfo[] viaArray = new RequestInfo[1];
        KvTransferException e2 = Contract.malformedOnly(data.length,
                () -> viaArray[0] = RequestInfo.fromBytes(Arrays.copyOf(data, data.length)));
        assertThat(e1 == null).as("buffer and array decodes agree on " + e1 + " / " + e2).isEqualTo(e2 == null);
        assertThat(viaBuffer[0]).isEqualTo(viaArray[0]);
    }

    @FuzzTest(maxDuration = "10m")
    void cacheState(byte[] data) {
        roundTrip(data, CacheState::fromBytes, CacheState::toBytes);
    }

    @FuzzTest(maxDuration = "10m")
    void commState(byte[] data) {
        roundTrip(data, CommState::fromBytes, CommState::toBytes);
    }

    @FuzzTest(maxDuration = "10m")
    void transceiverState(byte[] data) {
        roundTrip(data, TransceiverState::fromBytes, TransceiverState::toBytes);
    }

    @FuzzTest(maxDuration = "10m")
    void contextPhaseParams(byte[] data) {
        roundTrip(data, ContextPhaseParams::fromBytes, ContextPhaseParams::toBytes);
    }
}
