package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;
import java.util.Set;

/**
 * The {@code tcp.*} properties, read once at {@code create}; an unknown {@code tcp.*} key is refused naming the
 * known ones.
 *
 * @param connectTimeout   {@value #CONNECT_TIMEOUT_MS}: longest wait for one connect plus handshake (default
 *                         10000; a send retries until its own deadline)
 * @param handshakeTimeout {@value #HANDSHAKE_TIMEOUT_MS}: how long an accepted socket may take to send its hello
 *                         (default 10000)
 * @param socketBuffer     {@value #SOCKET_BUFFER_BYTES}: SO_SNDBUF / SO_RCVBUF, 0 = the OS default (default 4 MiB)
 * @param maxMessage       {@value #MAX_MESSAGE_BYTES}: largest message accepted; a longer frame header is a protocol
 *                         error that drops the peer (default 4 GiB)
 */
record TcpSettings(Duration connectTimeout, Duration handshakeTimeout, int socketBuffer, long maxMessage) {
    static final String PREFIX = "tcp.";
    static final String CONNECT_TIMEOUT_MS = "tcp.connectTimeoutMillis";
    static final String HANDSHAKE_TIMEOUT_MS = "tcp.handshakeTimeoutMillis";
    static final String SOCKET_BUFFER_BYTES = "tcp.socketBufferBytes";
    static final String MAX_MESSAGE_BYTES = "tcp.maxMessageBytes";
    static final Set<String> KNOWN = Set.of(CONNECT_TIMEOUT_MS, HANDSHAKE_TIMEOUT_MS, SOCKET_BUFFER_BYTES,
            MAX_MESSAGE_BYTES);

    static TcpSettings of(TransportConfig config) {
        config.checkKnownProperties(PREFIX, KNOWN);
        long connect = positive(config, CONNECT_TIMEOUT_MS, 10_000);
        long handshake = positive(config, HANDSHAKE_TIMEOUT_MS, 10_000);
        long buffer = config.longProperty(SOCKET_BUFFER_BYTES, 4L << 20);
        if (buffer < 0 || buffer > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("transport property " + SOCKET_BUFFER_BYTES + " = " + buffer
                    + ": must be in [0, " + Integer.MAX_VALUE + "]");
        }
        long max = positive(config, MAX_MESSAGE_BYTES, 4L << 30);
        return new TcpSettings(Duration.ofMillis(connect), Duration.ofMillis(handshake), (int) buffer, max);
    }

    private static long positive(TransportConfig config, String key, long def) {
        long v = config.longProperty(key, def);
        if (v <= 0) {
            throw new IllegalArgumentException("transport property " + key + " = " + v + ": must be positive");
        }
        return v;
    }
}
