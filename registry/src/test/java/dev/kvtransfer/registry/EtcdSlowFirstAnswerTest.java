package dev.kvtransfer.registry;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A first etcd answer slower than the per-call deadline (a cold JVM on a busy host starting gRPC's channel, as
 * seen when five instances started at once on two cores) does not fail the registration: until etcd has
 * answered once, a call gets {@link EtcdRegistry#FIRST_CALL_TIMEOUT}. Simulated with a proxy in front of a real
 * etcd that holds every new connection for 4 s, longer than the 3 s of a later call.
 */
class EtcdSlowFirstAnswerTest {
    private static final byte[] SECRET = "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII);
    private static final Duration HOLD = Duration.ofSeconds(4);

    @BeforeAll
    static void needsEtcd() {
        String why = EtcdServer.unavailable();
        Assumptions.assumeTrue(why.isEmpty(), why);
    }

    /** Accepts connections and forwards each to etcd after holding it for {@link #HOLD}. */
    private static final class HoldingProxy implements AutoCloseable {
        private final ServerSocket server;
        private final int target;

        HoldingProxy(int target) throws IOException {
            this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            this.target = target;
            Thread t = new Thread(this::accept, "holding-proxy");
            t.setDaemon(true);
            t.start();
        }

        int port() {
            return server.getLocalPort();
        }

        private void accept() {
            while (!server.isClosed()) {
                try {
                    Socket in = server.accept();
                    Thread t = new Thread(() -> forward(in), "holding-proxy-conn");
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return; // closed
                }
            }
        }

        private void forward(Socket in) {
            try (in; Socket out = new Socket(InetAddress.getLoopbackAddress(), target)) {
                TimeUnit.MILLISECONDS.sleep(HOLD.toMillis()); // the slow first answer this test is about
                Thread back = new Thread(() -> pipe(out, in), "holding-proxy-back");
                back.setDaemon(true);
                back.start();
                pipe(in, out);
                back.join(TimeUnit.SECONDS.toMillis(30));
            } catch (IOException | InterruptedException e) {
                // the client or etcd went away: the connection ends
            }
        }

        private static void pipe(Socket from, Socket to) {
            try {
                InputStream i = from.getInputStream();
                OutputStream o = to.getOutputStream();
                byte[] buf = new byte[16384];
                for (int n; (n = i.read(buf)) > 0; ) {
                    o.write(buf, 0, n);
                    o.flush();
                }
                to.shutdownOutput();
            } catch (IOException e) {
                // one side closed
            }
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }

    @Test
    void aFirstAnswerSlowerThanACallsDeadlineStillRegisters(@TempDir Path dir) throws Exception {
        try (EtcdServer etcd = new EtcdServer(dir).start();
             HoldingProxy proxy = new HoldingProxy(etcd.url().getPort());
             EtcdRegistry r = EtcdRegistry.open("etcd://127.0.0.1:" + proxy.port(), RegistryAuth.of(SECRET),
                     Duration.ofSeconds(2))) {
            long t0 = System.nanoTime();
            r.register(new InstanceRecord("gen-0", InstanceRecord.GENERATION, 1, "aeron", "pull", "TP1 PP1 CP1", "",
                    List.of("127.0.0.1:1"), "http://127.0.0.1:1", 0));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            System.out.println("registered through the holding proxy after " + ms + " ms");
            assertThat(ms).as("the proxy held the first answer").isGreaterThanOrEqualTo(HOLD.toMillis());
            assertThat(r.list()).extracting(InstanceRecord::id).containsExactly("gen-0");
        }
    }
}
