package dev.kvtransfer.core.protocol;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * Every control message: encode / decode round trips through its flyweight at any offset and byte order, and the
 * decoders' checks against hostile bytes — a checked decode either accepts or throws {@code MALFORMED} naming the
 * request; nothing else escapes.
 */
class ProtocolFuzzTest {
    private static ByteBuffer buffer(int bytes, boolean bigEndian) {
        return ByteBuffer.allocateDirect(bytes).order(bigEndian ? ByteOrder.BIG_ENDIAN : ByteOrder.LITTLE_ENDIAN);
    }

    @Property(tries = 300)
    void requestHeaderRoundTripsAtAnyOffset(@ForAll @IntRange(min = 0, max = 64) int at, @ForAll long id,
                                            @ForAll @IntRange(min = 1, max = 1 << 20) int info,
                                            @ForAll @IntRange(min = 1 << 10) int tag,
                                            @ForAll boolean bigEndian) {
        ByteBuffer b = buffer(at + RequestHeaderFlyweight.LENGTH, bigEndian);
        new RequestHeaderFlyweight().wrap(b, at).requestSend(info + 32L, id, tag);
        RequestHeaderFlyweight h = new RequestHeaderFlyweight().wrap(b, at);
        assertThat(h.kind()).isEqualTo(RequestHeaderFlyweight.KIND_REQUEST_SEND);
        assertThat(h.infoTag()).isEqualTo(tag);
        assertThat(h.infoLength()).isEqualTo(info + 32L);
        assertThat(h.requestId()).isEqualTo(id);
        h.checkRequestSend(32, 1 << 20, "rank 0");
        assertThat(h.isValidRequestSend(32, 1 << 20)).isTrue();
        // The wire is little-endian whatever the buffer's order.
        assertThat(b.duplicate().order(ByteOrder.LITTLE_ENDIAN).getLong(at + 16)).isEqualTo(id);
    }

    @Property(tries = 1000)
    void hostileRequestHeadersAreAcceptedOnlyWhenWellFormed(@ForAll @Size(24) byte[] bytes,
                                                            @ForAll @IntRange(min = 0, max = 32) int mac) {
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        RequestHeaderFlyweight h = new RequestHeaderFlyweight().wrap(b, 0);
        Throwable t = catchThrowable(() -> h.checkRequestSend(mac, 1 << 20, "rank 3"));
        boolean valid = h.kind() == RequestHeaderFlyweight.KIND_REQUEST_SEND && h.infoLength() > mac
                && h.infoLength() <= (1 << 20) + mac && h.infoTag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG;
        assertThat(h.isValidRequestSend(mac, 1 << 20)).as("the allocation-free check agrees").isEqualTo(valid);
        if (valid) {
            assertThat(t).isNull();
        } else {
            assertThat(t).isInstanceOf(KvTransferException.class);
            KvTransferException k = (KvTransferException) t;
            assertThat(k.code()).isEqualTo(ErrorCode.MALFORMED);
            assertThat(k.requestId()).isEqualTo(h.requestId());
            assertThat(k.getMessage()).contains("rank 3");
        }
    }

    @Property(tries = 300)
    void readySignalRoundTrips(@ForAll @IntRange(min = 0, max = 40) int at, @ForAll boolean push,
                               @ForAll boolean layered, @ForAll @Size(max = 64) List<@IntRange(min = 0) Integer> ids,
                               @ForAll @IntRange(min = 1, max = 64) int bpr, @ForAll boolean bigEndian) {
        int n = ids.size();
        int[] arr = ids.stream().mapToInt(Integer::intValue).toArray();
        ByteBuffer b = buffer(at + ReadySignalFlyweight.length(n, 32), bigEndian);
        new ReadySignalFlyweight().wrap(b, at).write(ReadySignalFlyweight.status(push, layered), n, bpr, arr);
        ReadySignalFlyweight r = new ReadySignalFlyweight().wrap(b, at);
        assertThat(r.refused()).isFalse();
        assertThat(r.push()).isEqualTo(push);
        assertThat(r.layered()).isEqualTo(layered);
        assertThat(r.blocksPerRegion()).isEqualTo(bpr);
        assertThat(r.blockIds(n, 7, 1)).containsExactly(arr);
    }

    @Property(tries = 200)
    void aRefusedReadySignalCarriesNoBlockIds(@ForAll @Size(min = 1, max = 16) List<@IntRange(min = 1) Integer> ids) {
        int n = ids.size();
        ByteBuffer b = buffer(ReadySignalFlyweight.length(n, 0), false);
        for (int i = 0; i < b.capacity(); i++) {
            b.put(i, (byte) 0x5A); // a reused buffer: stale bytes everywhere
        }
        new ReadySignalFlyweight().wrap(b, 0).write(ReadySignalFlyweight.STATUS_REFUSED, n, 1,
                ids.stream().mapToInt(Integer::intValue).toArray());
        ReadySignalFlyweight r = new ReadySignalFlyweight().wrap(b, 0);
        assertThat(r.refused()).isTrue();
        assertThat(r.blockIds(n, 1, 0)).containsOnly(0);
        assertThat(b.get(1)).isZero();
        assertThat(b.getShort(2)).isZero();
    }

    @Property(tries = 1000)
    void hostileReadySignalsNeverDecodeAWrongCount(@ForAll @Size(min = 12, max = 80) byte[] bytes,
                                                   @ForAll @IntRange(min = 0, max = 17) int expected) {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        ReadySignalFlyweight r = new ReadySignalFlyweight().wrap(b, 0);
        Throwable t = catchThrowable(() -> r.blockIds(expected, 99, 2));
        if (r.blockCount() == expected && ReadySignalFlyweight.length(expected, 0) <= bytes.length) {
            assertThat(t).isNull();
        } else if (r.blockCount() != expected) {
            assertThat(t).isInstanceOf(KvTransferException.class).hasMessageContaining("context rank 2");
            assertThat(((KvTransferException) t).code()).isEqualTo(ErrorCode.MALFORMED);
            assertThat(((KvTransferException) t).requestId()).isEqualTo(99);
        } else {
            // A count that fits no message of this length: the transport delivers whole messages of the expected
            // length only, so the flyweight reads past it only in this artificial case.
            assertThat(t).isInstanceOf(IndexOutOfBoundsException.class);
        }
        assertThat(r.blocksPerRegion()).isPositive();
    }

    @Property(tries = 500)
    void refusalsKeepTheirCodeAndCutLongReasons(@ForAll ErrorCode code, @ForAll String reason) {
        byte[] text = RefusalCodec.text(code, reason);
        assertThat(text.length).isLessThanOrEqualTo(RefusalCodec.MAX_REASON_BYTES);
        RefusalCodec.Refusal r = RefusalCodec.decode(text);
        assertThat(r.code()).isEqualTo(code);
        if ((code.name() + ": " + reason).getBytes(StandardCharsets.UTF_8).length <= RefusalCodec.MAX_REASON_BYTES) {
            assertThat(r.reason()).isEqualTo(reason.trim());
        }
    }

    @Property(tries = 1000)
    void hostileRefusalTextsDecodeToSomeCode(@ForAll @Size(max = 200) byte[] text, @ForAll int announced) {
        RefusalCodec.Refusal r = RefusalCodec.decode(text);
        assertThat(r.code()).isNotNull();
        assertThat(r.reason()).isNotNull();
        ByteBuffer b = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(0, announced);
        int len = RefusalCodec.readLength(b, 0);
        assertThat(len).isEqualTo(announced < 0 || announced > RefusalCodec.MAX_REASON_BYTES ? -1 : announced);
    }

    @Property(tries = 300)
    void pushNoticesAndEntriesRoundTrip(@ForAll @IntRange(min = 1, max = 3) int type, @ForAll int layer,
                                        @ForAll long value, @ForAll long region, @ForAll long off,
                                        @ForAll long len, @ForAll int crc,
                                        @ForAll @IntRange(min = 0, max = 5) int index, @ForAll boolean bigEndian) {
        ByteBuffer b = buffer(PushNoticeFlyweight.LENGTH + PushEntryFlyweight.LENGTH * 6, bigEndian);
        new PushNoticeFlyweight().wrap(b, 0).write(type, layer, value);
        new PushEntryFlyweight().wrap(b, PushNoticeFlyweight.LENGTH, index).write(region, off, len, crc);
        PushNoticeFlyweight n = new PushNoticeFlyweight().wrap(b, 0);
        assertThat(n.type()).isEqualTo(type);
        assertThat(n.layer()).isEqualTo(layer);
        assertThat(n.value()).isEqualTo(value);
        PushEntryFlyweight e = new PushEntryFlyweight().wrap(b, PushNoticeFlyweight.LENGTH, index);
        assertThat(e.regionId()).isEqualTo(region);
        assertThat(e.writeOffset()).isEqualTo(off);
        assertThat(e.writeLength()).isEqualTo(len);
        assertThat(e.crc()).isEqualTo(crc);
        assertThat(e.offset()).isEqualTo(PushNoticeFlyweight.LENGTH + PushEntryFlyweight.LENGTH * index);
    }

    @Provide
    Arbitrary<Integer> anyOffset() {
        return Arbitraries.integers().between(-5, 100);
    }

    @Property(tries = 200)
    void aFlyweightRefusesAnOffsetOutsideItsBuffer(@ForAll("anyOffset") int at) {
        ByteBuffer b = ByteBuffer.allocate(64);
        if (at < 0 || at > 64) {
            assertThatThrownBy(() -> new RequestHeaderFlyweight().wrap(b, at))
                    .isInstanceOf(IndexOutOfBoundsException.class).hasMessageContaining(Integer.toString(at));
        } else {
            assertThat(new RequestHeaderFlyweight().wrap(b, at).offset()).isEqualTo(at);
        }
    }

    @Property(tries = 50)
    void infoFrameLengthsAddTheMac(@ForAll @IntRange(min = 1, max = 1 << 20) int info,
                                   @ForAll @IntRange(min = 0, max = 64) int mac) {
        int frame = RequestInfoFrame.length(info, mac);
        assertThat(RequestInfoFrame.infoLength(frame, mac)).isEqualTo(info);
    }

    @Property(tries = 200)
    void partChecksumsRoundTrip(@ForAll @Size(max = 300) List<Integer> crcs, @ForAll @IntRange(min = 0, max = 16) int at,
                                @ForAll boolean bigEndian) {
        int n = crcs.size();
        int[] arr = crcs.stream().mapToInt(Integer::intValue).toArray();
        ByteBuffer b = buffer(at + (int) PartChecksumsFlyweight.length(n), bigEndian);
        new PartChecksumsFlyweight().wrap(b, at).write(arr, n);
        PartChecksumsFlyweight f = new PartChecksumsFlyweight().wrap(b, at);
        assertThat(f.count()).isEqualTo(n);
        for (int i = 0; i < n; i++) {
            assertThat(f.crc(i)).isEqualTo(arr[i]);
        }
    }
}
