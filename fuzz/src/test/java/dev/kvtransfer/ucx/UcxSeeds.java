package dev.kvtransfer.ucx;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;

/** The UCX targets' first seeds (valid frames), for {@code SeedWriter}. */
public final class UcxSeeds {
    private UcxSeeds() {
    }

    /**
     * @param root the resources directory
     * @throws IOException when a seed cannot be written
     */
    public static void write(Path root) throws IOException {
        Path dir = root.resolve("dev/kvtransfer/ucx/UcxBootstrapJazzerTestInputs");
        BootstrapFrames.Hello h = new BootstrapFrames.Hello(77, new byte[BootstrapAuth.NONCE_BYTES], 1000,
                "127.0.0.1:40001", "127.0.0.1:40002", HostIdentity.id(), BootstrapFrames.MODE_SHM, 12345,
                new byte[] {1, 2, 3, 4, 5, 6, 7, 8});
        byte[] hello = BootstrapHandshake.bytes(BootstrapFrames.encode(h));
        byte[] welcome = BootstrapHandshake.bytes(BootstrapFrames.encode(new BootstrapFrames.Welcome(78,
                new byte[BootstrapAuth.NONCE_BYTES], 1000, HostIdentity.id(), BootstrapFrames.MODE_SHM, 7,
                new byte[] {9, 9, 9})));
        put(dir.resolve("hello/valid"), hello);
        put(dir.resolve("welcome/valid"), welcome);
        ByteBuffer s = ByteBuffer.allocate(3 + hello.length + 4 + 33).order(ByteOrder.LITTLE_ENDIAN);
        s.put((byte) 1).putShort((short) hello.length).put(hello).putInt(33).put((byte) BootstrapFrames.CONFIRM);
        put(dir.resolve("bootstrapPort/signed-hello-then-confirm"), s.array());
        ByteBuffer raw = ByteBuffer.allocate(1 + 4 + 8).order(ByteOrder.LITTLE_ENDIAN);
        raw.put((byte) 0).putInt(8).put((byte) BootstrapFrames.PING);
        put(dir.resolve("bootstrapPort/raw-ping"), raw.array());
    }

    private static void put(Path file, byte[] bytes) throws IOException {
        Files.createDirectories(file.getParent());
        Files.write(file, bytes);
    }
}
