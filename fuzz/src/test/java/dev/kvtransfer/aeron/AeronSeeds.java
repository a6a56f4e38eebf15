package dev.kvtransfer.aeron;

import org.agrona.concurrent.UnsafeBuffer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/** The Aeron targets' first seeds, for {@code SeedWriter}. */
public final class AeronSeeds {
    private AeronSeeds() {
    }

    /**
     * @param root the resources directory
     * @throws IOException when a seed cannot be written
     */
    public static void write(Path root) throws IOException {
        Path dir = root.resolve("dev/kvtransfer/aeron/AeronHandshakeFuzzTestInputs");
        String self = Address.format("127.0.0.1", 40123, 0x1a2b3c4d5e6f7081L, null, 0);
        String peer = Address.format("127.0.0.1", 40200, 0x1111L, "drv-1", 1001);
        UnsafeBuffer b = new UnsafeBuffer(new byte[Handshake.maxLength()]);
        int n = new Handshake(null, 60_000).encode(b, 0, peer, self, 0x1111L);
        put(dir.resolve("hello/open"), Arrays.copyOf(b.byteArray(), n));
        n = new Handshake(new byte[32], 60_000).encode(b, 0, peer, self, 0x1111L);
        put(dir.resolve("hello/signed"), Arrays.copyOf(b.byteArray(), n));
        put(dir.resolve("address/valid"), peer.getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    }

    private static void put(Path file, byte[] bytes) throws IOException {
        Files.createDirectories(file.getParent());
        Files.write(file, bytes);
    }
}
