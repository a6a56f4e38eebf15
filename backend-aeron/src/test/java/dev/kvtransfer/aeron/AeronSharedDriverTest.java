package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.testkit.process.ChildJvm;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.File;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * One media driver shared by the processes of a host: {@code startHostSupport} launches it, its
 * {@code aeron.dir} goes to every process, their addresses carry the driver's identity, and managers of different
 * processes on it talk {@code aeron:ipc}; a manager with its own embedded driver still reaches them over UDP; a
 * killed process is lost; closing the host support ends the driver and removes its directory.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AeronSharedDriverTest {
    private static final int TAG = 4300;
    private static final Duration T = Duration.ofSeconds(20);

    private static void echo(Connection c, OffHeapBuffer len, OffHeapBuffer src, OffHeapBuffer dst, int n, long seed) {
        TestPattern.fill(src, 0, n, seed);
        len.asByteBuffer().putLong(0, n);
        c.send(TAG, len, 0, 8, T);
        c.send(TAG + 1, src, 0, n, T);
        c.recv(TAG + 1, dst, 0, n, T);
        ByteBuffer s = src.asByteBuffer();
        ByteBuffer d = dst.asByteBuffer();
        for (int i = 0; i < n; i++) {
            if (d.get(i) != (byte) (s.get(i) + 1)) {
                throw new AssertionError("byte " + i + " of " + n + ": expected " + (byte) (s.get(i) + 1) + ", found "
                        + d.get(i));
            }
        }
    }

    @Test
    void processesOnOneSharedDriverTalkIpcAndOthersUdp() throws Exception {
        AeronTransportProvider provider = new AeronTransportProvider();
        TransportConfig base = TransportConfig.builder().defaultTimeout(T)
                .property(AeronSettings.CLIENT_TIMEOUT_MS, "3000").build();
        HostSupport host = provider.startHostSupport(base);
        String dir = host.properties().get(AeronSettings.DIR);
        try {
            assertThat(host.describe()).contains(dir).contains("aeron:ipc");
            assertThat(new File(dir, "cnc.dat")).exists();
            List<String> args = new ArrayList<>(List.of("serve", "-", Integer.toString(TAG),
                    AeronSettings.DIR + "=" + dir));
            try (ChildJvm child = ChildJvm.start(AeronPeerMain.class, "256m", args);
                 OffHeapBuffer len = OffHeapBuffer.allocate(8);
                 OffHeapBuffer src = OffHeapBuffer.allocate(4 << 20);
                 OffHeapBuffer dst = OffHeapBuffer.allocate(4 << 20)) {
                String address = child.awaitLine("ADDRESS", Duration.ofSeconds(60));
                try (AeronConnectionManager onDriver = (AeronConnectionManager) provider.create(base.toBuilder()
                        .name("on-driver").properties(host.properties()).build());
                     AeronConnectionManager embedded = (AeronConnectionManager) provider.create(base.toBuilder()
                             .name("embedded").build())) {
                    Address mine = Address.parse(onDriver.localAddress());
                    Address theirs = Address.parse(address);
                    assertThat(theirs.driverId()).as("the child's address names the shared driver")
                            .isEqualTo(mine.driverId());
                    assertThat(Address.parse(embedded.localAddress()).driverId()).isNotEqualTo(mine.driverId());
                    Connection ipc = onDriver.connection(address);
                    for (int n : new int[] {1, 70_000, (4 << 20) - 3}) {
                        echo(ipc, len, src, dst, n, n);
                    }
                    assertThat(((AeronConnection) ipc).channel()).as("between processes on one driver")
                            .startsWith("aeron:ipc?");
                    Connection udp = embedded.connection(address);
                    echo(udp, len, src, dst, 1 << 20, 7);
                    assertThat(((AeronConnection) udp).channel()).startsWith("aeron:udp?");

                    // A killed process is lost: its client times out on the shared driver (3 s here).
                    child.process().destroyForcibly();
                    long t0 = System.nanoTime();
                    assertThatThrownBy(() -> ipc.recv(TAG + 1, dst, 0, 8, Duration.ofSeconds(30)))
                            .isInstanceOfSatisfying(TransportException.class,
                                    e -> assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.PEER_LOST));
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    System.out.println("shared driver: killed IPC peer lost after " + ms + " ms");
                    assertThat(ms).isLessThan(15_000);
                }
            }
        } finally {
            host.close();
        }
        assertThat(new File(dir)).doesNotExist();
        await().atMost(Duration.ofSeconds(20)).until(() -> !((AeronHostSupport) host).process().isAlive());
        host.close(); // idempotent
    }

    @Test
    void noHostSupportIsStartedForAConfigThatNamesADriverAlready() {
        assertThat(new AeronTransportProvider().startHostSupport(TransportConfig.builder()
                .property(AeronSettings.DIR, "/nonexistent").build())).isNull();
    }
}
