package dev.kvtransfer.core;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;

import static dev.kvtransfer.core.TransceiverConfig.*;

/**
 * The checks {@link TransceiverConfig.Builder#build()} runs once, each failing with the offending key and value,
 * and the deployment secret a valid builder resolves to.
 */
final class TransceiverConfigValidation {
    /** Secret used when authentication is on and no secret file is configured: random, one per JVM. */
    private static final byte[] JVM_SECRET = newSecret();

    private TransceiverConfigValidation() {
    }

    /**
     * @param b the builder's values
     * @throws IllegalArgumentException naming the first offending property and value
     */
    static void check(TransceiverConfig.Builder b) {
        if (b.backend.isEmpty()) {
            throw new IllegalArgumentException(P_BACKEND + " = '': must name a transport");
        }
        if (b.transferBufferBytes < 0) {
            throw new IllegalArgumentException(P_TRANSFER_BUFFER_BYTES + " = " + b.transferBufferBytes
                    + ": must be >= 0 (0 = dynamic buffers only)");
        }
        if (b.transferBufferBytes == 0 && b.maxTokensInBuffer == 0 && !b.allowDynamicBuffers) {
            throw new IllegalArgumentException(P_TRANSFER_BUFFER_BYTES + " = 0 with "
                    + P_ALLOW_DYNAMIC_BUFFERS + " = false: no staging memory at all");
        }
        if (b.maxTokensInBuffer < 0) {
            throw new IllegalArgumentException(P_MAX_TOKENS_IN_BUFFER + " = " + b.maxTokensInBuffer
                    + ": must be >= 0");
        }
        range(P_SEND_CONCURRENCY, b.sendConcurrency, 1, 1024);
        range(P_RESPONDER_INFO_WAIT_MICROS, b.responderInfoWaitMicros, RESPONDER_INFO_WAIT_TRANSPORT, 100_000);
        range(P_RECV_SLOTS, b.recvSlots, 1, 1024);
        range(P_POOL_SPIN_MICROS, b.poolSpinMicros, POOL_SPIN_TRANSPORT, 100_000);
        range(P_REQUEST_THREADS_PER_PEER_INSTANCE, b.requestThreadsPerPeerInstance, 1, 1024);
        range(P_MAX_PENDING_REQUESTS, b.maxPendingRequests, 1, 1 << 24);
        if (b.chunkBytes < 0) {
            throw new IllegalArgumentException(P_CHUNK_BYTES + " = " + b.chunkBytes + ": must be >= 0");
        }
        if (b.localOneCopyMinBytes < 0) {
            throw new IllegalArgumentException(P_LOCAL_ONE_COPY_MIN_BYTES + " = " + b.localOneCopyMinBytes
                    + ": must be >= 0 (0 = one copy whatever the size)");
        }
        positive(P_KV_TRANSFER_TIMEOUT_MS, b.kvTransferTimeout);
        positive(P_SENDER_FUTURE_TIMEOUT_MS, b.senderFutureTimeout);
    }

    /**
     * @param b a checked builder
     * @return a copy of the deployment secret (the secret file's bytes, or the per-JVM secret), or {@code null}
     *         when authentication is off
     * @throws IllegalArgumentException when the secret file cannot be read or is too short
     */
    static byte[] secret(TransceiverConfig.Builder b) {
        if (!b.auth) {
            return null;
        }
        return b.authSecretFile == null ? JVM_SECRET.clone() : readSecret(b.authSecretFile);
    }

    private static byte[] newSecret() {
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        return b;
    }

    private static byte[] readSecret(Path file) {
        byte[] b;
        try {
            b = Files.readAllBytes(file);
        } catch (IOException | RuntimeException e) {
            throw new IllegalArgumentException(P_AUTH_SECRET_FILE + " = '" + file + "': cannot read it ("
                    + e.getClass().getSimpleName() + ": " + e.getMessage() + ")");
        }
        if (b.length < 16) {
            throw new IllegalArgumentException(P_AUTH_SECRET_FILE + " = '" + file + "': holds " + b.length
                    + " bytes, a secret needs at least 16");
        }
        return b;
    }

    private static void range(String key, int v, int min, int max) {
        if (v < min || v > max) {
            throw new IllegalArgumentException(key + " = " + v + ": must be in [" + min + ", " + max + "]");
        }
    }

    private static void positive(String key, Duration d) {
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(key + " = " + d.toMillis() + ": must be positive");
        }
    }
}
