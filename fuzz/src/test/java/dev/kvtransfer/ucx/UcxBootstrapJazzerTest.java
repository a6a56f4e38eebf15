package dev.kvtransfer.ucx;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.fuzz.Contract;
import org.junit.jupiter.api.AfterAll;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The UCX backend's bootstrap (its TCP port, the one port a UCX manager opens itself): the HELLO and WELCOME
 * decoders on coverage-guided bytes (a {@code Violation} or a frame that re-encodes to the same bytes), and a
 * live manager with a deployment secret taking hostile sessions on loopback. A session is raw bytes, or a HELLO
 * built from the input and signed with the secret (the insider case: a holder of the secret sends fields no
 * genuine peer would), freshened so that it gets past the clock check, followed by the input's further frames.
 * After each the manager runs, holds no connection, and closes the session within the handshake timeout.
 */
class UcxBootstrapJazzerTest {
    static final byte[] SECRET = "fuzzing secret of thirty-two b..".getBytes(StandardCharsets.US_ASCII);
    private static UcxConnectionManager target;

    private static synchronized UcxConnectionManager target() {
        if (target == null) {
            target = new UcxConnectionManager(TransportConfig.builder().name("fuzz-bootstrap")
                    .defaultTimeout(Duration.ofSeconds(30)).authSecret(SECRET)
                    .property(UcxSettings.HANDSHAKE_TIMEOUT, "400").errorHandler(e -> { }).build());
        }
        return target;
    }

    @AfterAll
    static void closeTarget() {
        if (target != null) {
            target.close();
            target = null;
        }
    }

    @FuzzTest(maxDuration = "10m")
    void hello(byte[] data) {
        ByteBuffer b = ByteBuffer.wrap(data);
        BootstrapFrames.Hello[] h = new BootstrapFrames.Hello[1];
        if (Contract.only(data.length, () -> h[0] = BootstrapFrames.decodeHello(b),
                BootstrapFrames.Violation.class) == null) {
            assertThat(BootstrapHandshake.bytes(BootstrapFrames.encode(h[0]))).as("re-encoded").isEqualTo(data);
        }
        assertThat(b.position()).as("the caller's buffer is not moved").isZero();
    }

    @FuzzTest(maxDuration = "10m")
    void welcome(byte[] data) {
        BootstrapFrames.Welcome[] w = new BootstrapFrames.Welcome[1];
        if (Contract.only(data.length, () -> w[0] = BootstrapFrames.decodeWelcome(ByteBuffer.wrap(data)),
                BootstrapFrames.Violation.class) == null) {
            assertThat(BootstrapHandshake.bytes(BootstrapFrames.encode(w[0]))).as("re-encoded").isEqualTo(data);
        }
    }

    /**
     * First byte: 0 = the rest is sent as is; otherwise the rest is {@code [u16 hello length][hello fields]
     * [further bytes]}: the hello is framed and signed (a decodable one is first freshened: now as its
     * timestamp, the manager's address as its target), the further bytes follow raw.
     */
    @FuzzTest(maxDuration = "10m")
    void bootstrapPort(byte[] data) throws IOException {
        UcxConnectionManager m = target();
        byte[] wire = data.length == 0 || data[0] == 0 ? java.util.Arrays.copyOfRange(data, Math.min(1,
                data.length), data.length) : signedSession(data, m);
        String[] hp = m.localAddress().split(":");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", Integer.parseInt(hp[hp.length - 1])), 5000);
            s.setSoTimeout(10_000);
            OutputStream out = s.getOutputStream();
            try {
                out.write(wire);
                out.flush();
            } catch (IOException e) {
                // The manager may close a session before it read everything: allowed.
            }
            InputStream in = s.getInputStream();
            byte[] sink = new byte[4096];
            try {
                while (in.read(sink) >= 0) {
                    // drain until the manager closes the session
                }
            } catch (SocketTimeoutException e) {
                throw new AssertionError("the manager kept a hostile session open for 10 s", e);
            } catch (IOException e) {
                // reset by the manager: closed
            }
        }
        assertThat(m.isRunning()).as("manager running").isTrue();
        assertThat(m.connectionsForTest()).as("hostile sessions leave no connection").isEmpty();
    }

    private static byte[] signedSession(byte[] data, UcxConnectionManager m) {
        ByteBuffer in = ByteBuffer.wrap(data, 1, data.length - 1).order(ByteOrder.LITTLE_ENDIAN);
        int n = in.remaining() >= 2 ? Math.min(in.getShort() & 0xffff, in.remaining()) : 0;
        byte[] fields = new byte[n];
        in.get(fields);
        byte[] rest = new byte[in.remaining()];
        in.get(rest);
        ByteBuffer f = ByteBuffer.wrap(fields);
        try {
            BootstrapFrames.Hello h = BootstrapFrames.decodeHello(f);
            f = BootstrapFrames.encode(new BootstrapFrames.Hello(h.instance(), h.nonce(), System.currentTimeMillis(),
                    h.address(), m.localAddress(), h.hostId(), h.mode(), h.senderIdForYou(), h.worker()));
        } catch (BootstrapFrames.Violation v) {
            // sent as it is, signed
        }
        byte[] mac = new BootstrapAuth(SECRET, 60_000).helloMac(f.duplicate());
        ByteBuffer b = ByteBuffer.allocate(4 + f.remaining() + mac.length + rest.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(f.remaining() + mac.length).put(f).put(mac).put(rest);
        return b.array();
    }
}
