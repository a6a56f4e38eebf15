package dev.kvtransfer.core.protocol;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.fuzz.Contract;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The control protocol's checked decodes (PROTOCOL.md) on coverage-guided bytes, at any offset and byte order of
 * the receiving buffer: the request header's check, the ready signal's block ids, the refusal's length and text,
 * the push notice and entries, the part checksums. Each either accepts exactly what PROTOCOL.md allows or throws
 * {@code MALFORMED}; the plain accessors never read outside the message. ({@code ProtocolFuzzTest} in core
 * covers the same decoders with generated inputs.)
 */
class ControlProtocolFuzzTest {
    private static final long MAX_INFO = 1 << 20;

    private static ByteBuffer place(FuzzedDataProvider d, int length) {
        int at = d.consumeInt(0, 64);
        boolean big = d.consumeBoolean();
        byte[] body = d.consumeBytes(length);
        ByteBuffer b = ByteBuffer.allocate(at + length).order(big ? ByteOrder.BIG_ENDIAN : ByteOrder.LITTLE_ENDIAN);
        b.put(at, body);
        b.position(at); // the message's offset, read back by the caller
        return b;
    }

    @FuzzTest(maxDuration = "10m")
    void controlMessages(FuzzedDataProvider d) {
        int kind = d.consumeInt(0, 4);
        switch (kind) {
            case 0 -> requestHeader(d);
            case 1 -> readySignal(d);
            case 2 -> refusal(d);
            case 3 -> push(d);
            default -> partChecksums(d);
        }
    }

    private static void requestHeader(FuzzedDataProvider d) {
        int mac = d.consumeBoolean() ? 32 : 0;
        ByteBuffer b = place(d, RequestHeaderFlyweight.LENGTH);
        RequestHeaderFlyweight h = new RequestHeaderFlyweight().wrap(b, b.position());
        KvTransferException e = Contract.malformedOnly(RequestHeaderFlyweight.LENGTH,
                () -> h.checkRequestSend(mac, MAX_INFO, "rank 0"));
        boolean valid = h.kind() == RequestHeaderFlyweight.KIND_REQUEST_SEND && h.infoLength() > mac
                && h.infoLength() <= MAX_INFO + mac && h.infoTag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG;
        assertThat(e == null).as("accepted exactly when PROTOCOL.md allows it").isEqualTo(valid);
        assertThat(h.isValidRequestSend(mac, MAX_INFO)).as("the allocation-free check agrees").isEqualTo(valid);
        if (e != null) {
            assertThat(e.requestId()).as("names the request").isEqualTo(h.requestId());
        }
    }

    private static void readySignal(FuzzedDataProvider d) {
        int expected = d.consumeInt(0, 1024);
        int mac = d.consumeBoolean() ? 32 : 0;
        int len = ReadySignalFlyweight.length(expected, mac);
        ByteBuffer b = place(d, len);
        ReadySignalFlyweight r = new ReadySignalFlyweight().wrap(b, b.position());
        assertThat(r.blocksPerRegion()).isPositive();
        boolean refused = r.refused();
        assertThat(refused || r.push() || (r.status() & ReadySignalFlyweight.STATUS_PULL) != 0 || !refused).isTrue();
        int[][] ids = new int[1][];
        KvTransferException e = Contract.malformedOnly(len, () -> ids[0] = r.blockIds(expected, 7, 1));
        assertThat(e == null).isEqualTo(r.blockCount() == expected);
        if (e == null) {
            assertThat(ids[0]).hasSize(expected);
        } else {
            assertThat(e.requestId()).isEqualTo(7);
        }
    }

    private static void refusal(FuzzedDataProvider d) {
        ByteBuffer b = place(d, RefusalCodec.LENGTH_BYTES);
        int len = RefusalCodec.readLength(b, b.position());
        int raw = b.duplicate().order(ByteOrder.LITTLE_ENDIAN).getInt(b.position());
        assertThat(len).isEqualTo(raw < 0 || raw > RefusalCodec.MAX_REASON_BYTES ? -1 : raw);
        byte[] text = d.consumeRemainingAsBytes();
        RefusalCodec.Refusal[] r = new RefusalCodec.Refusal[1];
        assertThat(Contract.malformedOnly(text.length, () -> r[0] = RefusalCodec.decode(text))).isNull();
        assertThat(r[0].code()).isNotNull();
        assertThat(r[0].reason()).isNotNull();
    }

    private static void push(FuzzedDataProvider d) {
        ByteBuffer b = place(d, PushNoticeFlyweight.LENGTH);
        PushNoticeFlyweight n = new PushNoticeFlyweight().wrap(b, b.position());
        int type = n.type();
        long value = n.value();
        if (type == PushNoticeFlyweight.TYPE_ABORT) {
            ErrorCode code = value >= 0 && value < ErrorCode.values().length ? ErrorCode.values()[(int) value]
                    : ErrorCode.INTERNAL;
            assertThat(code).isNotNull();
        }
        int entries = d.consumeInt(0, 64);
        ByteBuffer list = place(d, PushEntryFlyweight.LENGTH * entries);
        PushEntryFlyweight e = new PushEntryFlyweight();
        for (int i = 0; i < entries; i++) {
            e.wrap(list, list.position(), i);
            long end = e.writeOffset() + e.writeLength();
            assertThat(e.regionId() ^ e.crc() ^ end).isNotNull();
        }
    }

    private static void partChecksums(FuzzedDataProvider d) {
        int n = d.consumeInt(0, 4096);
        long len = PartChecksumsFlyweight.length(n);
        ByteBuffer b = place(d, (int) len);
        PartChecksumsFlyweight f = new PartChecksumsFlyweight().wrap(b, b.position());
        if (f.count() == n) {
            for (int i = 0; i < n; i++) {
                f.crc(i);
            }
        }
    }
}
