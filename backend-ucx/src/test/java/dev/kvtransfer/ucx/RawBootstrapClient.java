package dev.kvtransfer.ucx;

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;

/**
 * A hand-driven bootstrap peer for tests: a plain socket to a manager's bootstrap port that writes whatever
 * bytes a test chooses (genuine, forged, replayed or garbage) and reads the frames the manager answers.
 */
final class RawBootstrapClient implements AutoCloseable {
    final Socket socket;
    private final DataInputStream in;
    private final OutputStream out;

    RawBootstrapClient(String address, Duration timeout) throws IOException {
        InetSocketAddress a = UcxAddresses.parse(address);
        socket = new Socket();
        socket.connect(a, (int) timeout.toMillis());
        socket.setSoTimeout((int) timeout.toMillis());
        socket.setTcpNoDelay(true);
        in = new DataInputStream(socket.getInputStream());
        out = socket.getOutputStream();
    }

    void sendRaw(byte[] bytes) throws IOException {
        out.write(bytes);
        out.flush();
    }

    void sendFrame(ByteBuffer payload) throws IOException {
        ByteBuffer f = ByteBuffer.allocate(4 + payload.remaining()).order(ByteOrder.LITTLE_ENDIAN);
        f.putInt(payload.remaining()).put(payload.duplicate());
        sendRaw(f.array());
    }

    /** @return the next frame's payload, or null when the manager closed the connection */
    ByteBuffer readFrame() throws IOException {
        byte[] len = new byte[4];
        try {
            in.readFully(len);
        } catch (EOFException e) {
            return null;
        }
        int n = ByteBuffer.wrap(len).order(ByteOrder.LITTLE_ENDIAN).getInt();
        if (n <= 0 || n > BootstrapFrames.MAX_FRAME) {
            throw new IOException("bad frame length " + n);
        }
        byte[] p = new byte[n];
        in.readFully(p);
        return ByteBuffer.wrap(p).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** @return whether the manager closed the connection within the socket timeout (reading and dropping bytes) */
    boolean closedByPeer() throws IOException {
        InputStream s = socket.getInputStream();
        byte[] sink = new byte[4096];
        try {
            while (true) {
                if (s.read(sink) < 0) {
                    return true;
                }
            }
        } catch (SocketTimeoutException e) {
            return false;
        } catch (IOException e) {
            return true; // reset
        }
    }

    /** A hello's payload: fields, then the MAC (of {@code secret}, or zeros). */
    static ByteBuffer hello(BootstrapFrames.Hello h, byte[] secret) {
        ByteBuffer fields = BootstrapFrames.encode(h);
        byte[] mac = secret == null ? new byte[BootstrapAuth.MAC_BYTES]
                : new BootstrapAuth(secret, 60_000).helloMac(fields);
        ByteBuffer b = ByteBuffer.allocate(fields.remaining() + mac.length).order(ByteOrder.LITTLE_ENDIAN);
        b.put(fields).put(mac).flip();
        return b;
    }

    /** A plausible hello: fresh nonce, now, this host, shm mode, a fake worker address. */
    static BootstrapFrames.Hello plausibleHello(String claimedAddress, String target, long instance) {
        byte[] nonce = new byte[BootstrapAuth.NONCE_BYTES];
        new java.util.Random(instance).nextBytes(nonce);
        return new BootstrapFrames.Hello(instance, nonce, System.currentTimeMillis(), claimedAddress, target,
                HostIdentity.id(), BootstrapFrames.MODE_SHM, 12345, new byte[] {1, 2, 3, 4, 5, 6, 7, 8});
    }

    static int type(ByteBuffer frame) {
        return frame == null ? -1 : frame.get(0) & 0xff;
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
