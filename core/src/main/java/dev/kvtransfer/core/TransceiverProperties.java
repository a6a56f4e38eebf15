package dev.kvtransfer.core;

import dev.kvtransfer.core.TransceiverConfig.Builder;
import dev.kvtransfer.core.TransceiverConfig.TransferMode;

import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import static dev.kvtransfer.core.TransceiverConfig.*;

/**
 * The string form of a {@link TransceiverConfig}: {@code kvtransfer.*} properties read into a builder and written
 * back, and the parser of each kind of value. A value that does not parse fails here, naming key and value; a value
 * that parses but is out of range fails in {@link TransceiverConfigValidation}.
 */
final class TransceiverProperties {
    private TransceiverProperties() {
    }

    /** @see TransceiverConfig#fromProperties(Map) */
    static TransceiverConfig read(Map<String, String> properties) {
        Builder b = TransceiverConfig.builder();
        for (Map.Entry<String, String> e : new TreeMap<>(properties).entrySet()) {
            String key = e.getKey();
            String v = e.getValue() == null ? "" : e.getValue().trim();
            if (!key.startsWith(PREFIX)) {
                continue;
            }
            switch (key) {
                case P_BACKEND -> b.backend(v);
                case P_FORMATTER -> b.formatter(v);
                case P_TRANSFER_BUFFER_BYTES -> b.transferBufferBytes(parseBytes(key, v));
                case P_MAX_TOKENS_IN_BUFFER -> b.maxTokensInBuffer(parseInt(key, v));
                case P_SEND_CONCURRENCY -> b.sendConcurrency(parseInt(key, v));
                case P_RESPONDER_INFO_WAIT_MICROS -> b.responderInfoWaitMicros(parseInt(key, v));
                case P_RECV_SLOTS -> b.recvSlots(parseInt(key, v));
                case P_PARALLEL_RECEIVE -> b.parallelReceive(parseBool(key, v));
                case P_ALLOW_DYNAMIC_BUFFERS -> b.allowDynamicBuffers(parseBool(key, v));
                case P_CHUNK_BYTES -> b.chunkBytes(parseBytes(key, v));
                case P_KV_TRANSFER_TIMEOUT_MS -> b.kvTransferTimeout(Duration.ofMillis(parseLong(key, v)));
                case P_SENDER_FUTURE_TIMEOUT_MS -> b.senderFutureTimeout(Duration.ofMillis(parseLong(key, v)));
                case P_TIMING_DIR -> b.timingDir(v.isEmpty() ? null : Path.of(v));
                case P_REQUEST_THREADS_PER_PEER_INSTANCE -> b.requestThreadsPerPeerInstance(parseInt(key, v));
                case P_MAX_PENDING_REQUESTS -> b.maxPendingRequests(parseInt(key, v));
                case P_JOURNAL_DIR -> b.journalDir(v.isEmpty() ? null : Path.of(v));
                case P_JOURNAL_CHECKSUMS -> b.journalChecksums(parseBool(key, v));
                case P_AUTH -> b.auth(parseAuth(key, v));
                case P_AUTH_SECRET_FILE -> b.authSecretFile(v.isEmpty() ? null : Path.of(v));
                case P_PART_CHECKSUMS -> b.partChecksums(parseBool(key, v));
                case P_COALESCE -> b.coalesce(parseBool(key, v));
                case P_POSTED_READY -> b.postedReady(parseBool(key, v));
                case P_POOL_SPIN_MICROS -> b.poolSpinMicros(parseInt(key, v));
                case P_TRANSFER_MODE -> b.transferMode(parseMode(key, v));
                case P_LOCAL_ONE_COPY_MIN_BYTES -> b.localOneCopyMinBytes(parseBytes(key, v));
                default -> throw new IllegalArgumentException("unknown property " + key + " = '" + v
                        + "'; known: " + String.join(", ", TransceiverConfig.defaults().toProperties().keySet()));
            }
        }
        return b.build();
    }

    /** @see TransceiverConfig#toProperties() */
    static Map<String, String> write(TransceiverConfig c) {
        Map<String, String> m = new LinkedHashMap<>();
        m.put(P_BACKEND, c.backend());
        m.put(P_FORMATTER, c.formatter().orElse(""));
        m.put(P_TRANSFER_BUFFER_BYTES, Long.toString(c.transferBufferBytes()));
        m.put(P_MAX_TOKENS_IN_BUFFER, Integer.toString(c.maxTokensInBuffer()));
        m.put(P_SEND_CONCURRENCY, Integer.toString(c.sendConcurrency()));
        m.put(P_RESPONDER_INFO_WAIT_MICROS, Integer.toString(c.responderInfoWaitMicros()));
        m.put(P_RECV_SLOTS, Integer.toString(c.recvSlots()));
        m.put(P_PARALLEL_RECEIVE, Boolean.toString(c.parallelReceive()));
        m.put(P_ALLOW_DYNAMIC_BUFFERS, Boolean.toString(c.allowDynamicBuffers()));
        m.put(P_CHUNK_BYTES, Long.toString(c.chunkBytes()));
        m.put(P_KV_TRANSFER_TIMEOUT_MS, Long.toString(c.kvTransferTimeout().toMillis()));
        m.put(P_SENDER_FUTURE_TIMEOUT_MS, Long.toString(c.senderFutureTimeout().toMillis()));
        m.put(P_TIMING_DIR, text(c.timingDir()));
        m.put(P_REQUEST_THREADS_PER_PEER_INSTANCE, Integer.toString(c.requestThreadsPerPeerInstance()));
        m.put(P_MAX_PENDING_REQUESTS, Integer.toString(c.maxPendingRequests()));
        m.put(P_JOURNAL_DIR, text(c.journalDir()));
        m.put(P_JOURNAL_CHECKSUMS, Boolean.toString(c.journalChecksums()));
        m.put(P_AUTH, c.authRequired() ? "required" : "off");
        m.put(P_AUTH_SECRET_FILE, text(c.authSecretFile()));
        m.put(P_PART_CHECKSUMS, Boolean.toString(c.partChecksums()));
        m.put(P_COALESCE, Boolean.toString(c.coalesce()));
        m.put(P_POSTED_READY, Boolean.toString(c.postedReady()));
        m.put(P_POOL_SPIN_MICROS, Integer.toString(c.poolSpinMicros()));
        m.put(P_TRANSFER_MODE, c.transferMode().name().toLowerCase(Locale.ROOT));
        m.put(P_LOCAL_ONE_COPY_MIN_BYTES, Long.toString(c.localOneCopyMinBytes()));
        return m;
    }

    private static String text(Optional<Path> p) {
        return p.map(Path::toString).orElse("");
    }

    private static long parseLong(String key, String v) {
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + " = '" + v + "': not an integer");
        }
    }

    private static int parseInt(String key, String v) {
        long l = parseLong(key, v);
        if (l < Integer.MIN_VALUE || l > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(key + " = '" + v + "': out of int range");
        }
        return (int) l;
    }

    private static boolean parseAuth(String key, String v) {
        if (v.equalsIgnoreCase("required")) {
            return true;
        }
        if (v.equalsIgnoreCase("off")) {
            return false;
        }
        throw new IllegalArgumentException(key + " = '" + v + "': expected required or off");
    }

    private static TransferMode parseMode(String key, String v) {
        if (v.equalsIgnoreCase("pull")) {
            return TransferMode.PULL;
        }
        if (v.equalsIgnoreCase("push")) {
            return TransferMode.PUSH;
        }
        throw new IllegalArgumentException(key + " = '" + v + "': expected pull or push");
    }

    private static boolean parseBool(String key, String v) {
        if (v.equalsIgnoreCase("true")) {
            return true;
        }
        if (v.equalsIgnoreCase("false")) {
            return false;
        }
        throw new IllegalArgumentException(key + " = '" + v + "': not true or false");
    }

    /**
     * Parses a byte size: a plain number or one with a 1024-based unit suffix (B, KB, MB, GB, TB; also K, M, G,
     * T, KiB, MiB, GiB, TiB), as TensorRT-LLM's buffer-size variable.
     */
    static long parseBytes(String key, String v) {
        String s = v.trim().toUpperCase(Locale.ROOT);
        long mult = 1;
        String[][] units = {{"TIB", "TB", "T"}, {"GIB", "GB", "G"}, {"MIB", "MB", "M"}, {"KIB", "KB", "K"}};
        long[] mults = {1L << 40, 1L << 30, 1L << 20, 1L << 10};
        outer:
        for (int i = 0; i < units.length; i++) {
            for (String u : units[i]) {
                if (s.endsWith(u)) {
                    mult = mults[i];
                    s = s.substring(0, s.length() - u.length()).trim();
                    break outer;
                }
            }
        }
        if (mult == 1 && s.endsWith("B")) {
            s = s.substring(0, s.length() - 1).trim();
        }
        long n;
        try {
            n = Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + " = '" + v + "': not a byte size (e.g. 1048576, 64MB, 1GiB)");
        }
        if (n < 0 || n > Long.MAX_VALUE / mult) {
            throw new IllegalArgumentException(key + " = '" + v + "': out of range");
        }
        return n * mult;
    }
}
