package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.WireReader;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The control plane sends the requester's {@link TransceiverState} in every request info, identical from request to
 * request: this remembers the last few encodings (by the state's identity) and decodings (by the exact bytes), so a
 * steady stream of requests neither re-encodes nor re-decodes them (without it the peer's state was decoded
 * and rebuilt per request, about 1.5 KB, and encoded per request, about 2 KB).
 *
 * <p>Safe to share: the states are immutable, a decoding hit needs the bytes to match byte for byte what was decoded
 * (and validated) before, so it returns exactly what decoding would; entries are immutable and replaced whole.
 * Bounded: {@value #ENTRIES} entries each way, replaced round robin.
 */
final class StateCodecCache {
    static final int ENTRIES = 32;

    private record Encoded(TransceiverState state, byte[] bytes) {
    }

    private record Decoded(int version, byte[] bytes, long tail, TransceiverState state) {
    }

    private static final AtomicReferenceArray<Encoded> ENCODED = new AtomicReferenceArray<>(ENTRIES);
    private static final AtomicReferenceArray<Decoded> DECODED = new AtomicReferenceArray<>(ENTRIES);
    private static final AtomicInteger NEXT_ENCODED = new AtomicInteger();
    private static final AtomicInteger NEXT_DECODED = new AtomicInteger();

    private StateCodecCache() {
    }

    /** @return the encoding made before for this very instance, or null */
    static byte[] encoded(TransceiverState state) {
        for (int i = 0; i < ENTRIES; i++) {
            Encoded e = ENCODED.get(i);
            if (e == null) {
                return null;
            }
            if (e.state == state) {
                return e.bytes;
            }
        }
        return null;
    }

    static void rememberEncoded(TransceiverState state, byte[] bytes) {
        ENCODED.set(slot(ENCODED, NEXT_ENCODED), new Encoded(state, bytes));
    }

    /**
     * @return the state decoded before from exactly the next bytes of {@code r} (which are then consumed), or null
     *         (nothing consumed)
     */
    static TransceiverState decoded(WireReader r) {
        for (int i = 0; i < ENTRIES; i++) {
            Decoded d = DECODED.get(i);
            if (d == null) {
                return null;
            }
            // The last 8 bytes first (the rank's own index ends the encoding): ranks of one peer differ there.
            // The format version too: the same bytes may mean another state under an older version.
            if (d.version == r.version() && r.longAhead(d.bytes.length - 8, d.tail) && r.skipIfNext(d.bytes)) {
                return d.state;
            }
        }
        return null;
    }

    static void rememberDecoded(int version, byte[] bytes, TransceiverState state) {
        if (bytes.length < 8) {
            return;
        }
        long tail = java.nio.ByteBuffer.wrap(bytes, bytes.length - 8, 8).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                .getLong();
        DECODED.set(slot(DECODED, NEXT_DECODED), new Decoded(version, bytes, tail, state));
    }

    /** The first empty slot, else round robin. */
    private static int slot(AtomicReferenceArray<?> a, AtomicInteger next) {
        for (int i = 0; i < ENTRIES; i++) {
            if (a.get(i) == null) {
                return i;
            }
        }
        return Math.floorMod(next.getAndIncrement(), ENTRIES);
    }

    /** Tests: forgets everything. */
    static void clear() {
        for (int i = 0; i < ENTRIES; i++) {
            ENCODED.set(i, null);
            DECODED.set(i, null);
        }
    }
}
