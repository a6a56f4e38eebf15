package dev.kvtransfer.testkit.process;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ServiceLoader;

/**
 * A peer in another OS process for the cross-process rule of {@code TransportConformanceTest}: it creates one
 * manager of the transport named by its first argument (found through {@link ServiceLoader}, as a user would),
 * prints {@code ADDRESS <address>}, then answers every message of tag {@link #ECHO_TAG} (first 8 bytes: the
 * length that follows on {@link #DATA_TAG}) by receiving the payload and sending it back with every byte
 * incremented by one, until it gets a length of -1 or is killed.
 *
 * <p>Arguments: {@code <provider name> <host> [key=value ...]} (transport properties).
 */
public final class TransportEchoMain {
    /** Tag of the length message. */
    public static final int ECHO_TAG = 0x7ffffff0;
    /** Tag of the payload, both directions. */
    public static final int DATA_TAG = 0x7ffffff1;

    private TransportEchoMain() {
    }

    /**
     * Runs the echo peer.
     *
     * @param args provider name, host, transport properties
     */
    public static void main(String[] args) {
        TransportProvider provider = ServiceLoader.load(TransportProvider.class).stream()
                .map(ServiceLoader.Provider::get).filter(p -> p.name().equals(args[0])).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no transport named " + args[0]));
        TransportConfig.Builder b = TransportConfig.builder().name("echo-child").host(args[1])
                .defaultTimeout(Duration.ofSeconds(60));
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            b.property(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        try (HostBufferManager memory = new HostBufferManager();
             ConnectionManager m = provider.create(b.build());
             MemoryBuffer len = memory.allocate(8, MemoryKind.HOST)) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            while (true) {
                Connection c = m.recvConnect(ECHO_TAG, len, 0, 8);
                long n = len.asByteBuffer().getLong(0);
                if (n < 0) {
                    break;
                }
                try (MemoryBuffer data = memory.allocate(n, MemoryKind.HOST)) {
                    c.recv(DATA_TAG, data, 0, n);
                    ByteBuffer bb = data.asByteBuffer();
                    for (int i = 0; i < n; i++) {
                        bb.put(i, (byte) (bb.get(i) + 1));
                    }
                    c.send(DATA_TAG, data, 0, n);
                }
            }
            System.out.println("ECHO-DONE");
        }
    }
}
