package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * SPEC.md §1 delivery rules of the transport suite: exact bytes at every size, order per (connection, tag), tags
 * that never mix over their full 32 bits, {@code recvConnect}, concurrency and length mismatches. Part of
 * {@link TransportConformanceTest}, which a backend extends.
 */
public abstract class TransportDeliveryRules extends TransportSuiteSupport {
    // ---- required rules ----

    @Test
    public void required_spec1_01_sendThenRecvDeliversExactBytes() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        ExecutorService ex = threads(1);
        int tag = 1 << 10;
        for (long size : sizes()) {
            MemoryBuffer src = buffer(size + 16);
            MemoryBuffer dst = buffer(size + 16);
            fill(src, 3, size, size);
            // Started before the receive is posted; large sends may wait for it (rendezvous), so on a thread.
            Future<?> sent = ex.submit(() -> ab.send(tag, src, 3, size));
            ba.recv(tag, dst, 5, size);
            get(sent);
            verify(dst, 5, size, size);
        }
    }

    @Test
    public void required_spec1_02_recvPostedBeforeSendDeliversExactBytes() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        ExecutorService ex = threads(1);
        for (long size : sizes()) {
            MemoryBuffer src = buffer(size);
            MemoryBuffer dst = buffer(size);
            fill(src, 0, size, ~size);
            CountDownLatch posting = new CountDownLatch(1);
            Future<?> received = ex.submit(() -> {
                posting.countDown();
                ba.recv(2000, dst, 0, size);
                return null;
            });
            assertThat(posting.await(30, TimeUnit.SECONDS)).isTrue();
            ab.send(2000, src, 0, size);
            get(received);
            verify(dst, 0, size, ~size);
        }
    }

    @Test
    public void required_spec1_03_smallSendCompletesBeforeTheReceiveIsPosted() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer src = buffer(EAGER_BYTES);
        MemoryBuffer dst = buffer(EAGER_BYTES);
        // The protocol's id / info / ready messages go out before the peer receives them.
        long[] sizes = {8, 1, EAGER_BYTES};
        int tag = 19;
        for (int i = 0; i < sizes.length; i++) {
            fill(src, 0, sizes[i], 100 + i);
            ab.send(tag, src, 0, sizes[i], Duration.ofSeconds(10));
        }
        Connection ba = b.connection(a.localAddress());
        for (int i = 0; i < sizes.length; i++) {
            ba.recv(tag, dst, 0, sizes[i]);
            verify(dst, 0, sizes[i], 100 + i);
        }
    }

    @Test
    public void required_spec1_04_messagesOfOneConnectionAndTagArriveInOrder() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int n = 500;
        ExecutorService ex = threads(1);
        Future<?> sender = ex.submit(() -> {
            MemoryBuffer src = buffer(1000 + n);
            for (int i = 0; i < n; i++) {
                fill(src, 0, 1000 + i, 7000 + i);
                ab.send(3000, src, 0, 1000 + i);
            }
            return null;
        });
        MemoryBuffer dst = buffer(1000 + n);
        for (int i = 0; i < n; i++) {
            ba.recv(3000, dst, 0, 1000 + i);
            verify(dst, 0, 1000 + i, 7000 + i);
        }
        get(sender);
    }

    @Test
    public void required_spec1_05_tagsDoNotMix() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int perTag = 20;
        int size = 256;
        ExecutorService ex = threads(1);
        Future<?> sender = ex.submit(() -> {
            MemoryBuffer src = buffer(size);
            for (int i = 0; i < perTag; i++) {
                for (int tag : new int[] {4001, 4002}) {
                    fill(src, 0, size, tag * 1000L + i);
                    ab.send(tag, src, 0, size);
                }
            }
            return null;
        });
        MemoryBuffer dst = buffer(size);
        // Reverse order: everything of the second tag first, then the first tag.
        for (int tag : new int[] {4002, 4001}) {
            for (int i = 0; i < perTag; i++) {
                ba.recv(tag, dst, 0, size);
                verify(dst, 0, size, tag * 1000L + i);
            }
        }
        get(sender);
    }

    @Test
    public void required_spec1_06_recvConnectReturnsTheSendersConnectionWhichCanReply() throws Exception {
        ConnectionManager server = newManager();
        ConnectionManager c1 = newManager();
        ConnectionManager c2 = newManager();
        MemoryBuffer msg = buffer(64);
        MemoryBuffer in = buffer(64);
        for (ConnectionManager client : List.of(c2, c1)) {
            fill(msg, 0, 64, client.localAddress().hashCode());
            client.connection(server.localAddress()).send(19, msg, 0, 64);
            Connection back = server.recvConnect(19, in, 0, 64);
            verify(in, 0, 64, client.localAddress().hashCode());
            assertThat(back.peer()).isEqualTo(client.localAddress());
            fill(msg, 0, 64, 42);
            back.send(42, msg, 0, 8);
            MemoryBuffer reply = buffer(8);
            client.connection(server.localAddress()).recv(42, reply, 0, 8);
            verify(reply, 0, 8, 42);
        }
    }

    @Test
    public void required_spec1_07_manyConcurrentSendersToOneReceiver() throws Exception {
        ConnectionManager receiver = newManager();
        int managersCount = 4;
        int threadsPerManager = 2;
        int perThread = 50;
        int size = 4096 + 13;
        List<ConnectionManager> senders = new ArrayList<>();
        for (int i = 0; i < managersCount; i++) {
            senders.add(newManager());
        }
        ExecutorService ex = threads(managersCount * threadsPerManager);
        List<Future<?>> sends = new ArrayList<>();
        for (int m = 0; m < managersCount; m++) {
            for (int t = 0; t < threadsPerManager; t++) {
                Connection c = senders.get(m).connection(receiver.localAddress());
                int tag = 5000 + t;
                long seedBase = (m * 10L + t) * 1_000_000L;
                sends.add(ex.submit(() -> {
                    MemoryBuffer src = buffer(size);
                    for (int i = 0; i < perThread; i++) {
                        fill(src, 0, size, seedBase + i);
                        c.send(tag, src, 0, size);
                    }
                    return null;
                }));
            }
        }
        // Each (sender, tag) stream is received in order, streams interleaved round-robin.
        MemoryBuffer dst = buffer(size);
        for (int i = 0; i < perThread; i++) {
            for (int m = 0; m < managersCount; m++) {
                Connection c = receiver.connection(senders.get(m).localAddress());
                for (int t = 0; t < threadsPerManager; t++) {
                    c.recv(5000 + t, dst, 0, size);
                    verify(dst, 0, size, (m * 10L + t) * 1_000_000L + i);
                }
            }
        }
        for (Future<?> f : sends) {
            get(f);
        }
    }

    @Test
    public void required_spec1_08_recvConnectAcceptsManyConcurrentSenders() throws Exception {
        ConnectionManager receiver = newManager();
        int n = 8;
        List<ConnectionManager> senders = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            senders.add(newManager());
        }
        ExecutorService ex = threads(n);
        List<Future<?>> sends = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Connection c = senders.get(i).connection(receiver.localAddress());
            long seed = 900 + i;
            sends.add(ex.submit(() -> {
                MemoryBuffer src = buffer(24);
                fill(src, 0, 24, seed);
                c.send(19, src, 0, 24);
                return null;
            }));
        }
        MemoryBuffer dst = buffer(24);
        Set<String> seen = new java.util.HashSet<>();
        for (int i = 0; i < n; i++) {
            Connection c = receiver.recvConnect(19, dst, 0, 24, Duration.ofSeconds(30));
            int idx = -1;
            for (int k = 0; k < n; k++) {
                if (senders.get(k).localAddress().equals(c.peer())) {
                    idx = k;
                }
            }
            assertThat(idx).as("peer %s is one of the senders", c.peer()).isNotNegative();
            verify(dst, 0, 24, 900 + idx);
            assertThat(seen.add(c.peer())).isTrue();
        }
        for (Future<?> f : sends) {
            get(f);
        }
    }

    @Test
    public void required_spec1_09_bothDirectionsAtOnce() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        ExecutorService ex = threads(4);
        int n = 50;
        int size = 100_003;
        List<Future<?>> fs = new ArrayList<>();
        for (ConnectionManager[] pair : new ConnectionManager[][] {{a, b}, {b, a}}) {
            Connection out = pair[0].connection(pair[1].localAddress());
            Connection in = pair[1].connection(pair[0].localAddress());
            long seed = pair[0] == a ? 1 : 2;
            fs.add(ex.submit(() -> {
                MemoryBuffer src = buffer(size);
                for (int i = 0; i < n; i++) {
                    fill(src, 0, size, seed * 1000 + i);
                    out.send(6000, src, 0, size);
                }
                return null;
            }));
            fs.add(ex.submit(() -> {
                MemoryBuffer dst = buffer(size);
                for (int i = 0; i < n; i++) {
                    in.recv(6000, dst, 0, size);
                    verify(dst, 0, size, seed * 1000 + i);
                }
                return null;
            }));
        }
        for (Future<?> f : fs) {
            get(f);
        }
    }

    @Test
    public void required_spec1_10_lengthMismatchIsMalformed() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer src = buffer(128);
        MemoryBuffer dst = buffer(128);
        fill(src, 0, 100, 5);
        ab.send(7000, src, 0, 100);
        assertThatThrownBy(() -> ba.recv(7000, dst, 0, 64, Duration.ofSeconds(30)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED));
        // The connection stays usable.
        fill(src, 0, 50, 6);
        ab.send(7000, src, 0, 50);
        ba.recv(7000, dst, 0, 50);
        verify(dst, 0, 50, 6);
    }


    @Test
    public void required_spec1_19_tagsUseAllThirtyTwoBits() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        // Tags that agree in their low 16 (and low 24) bits, and the extremes.
        int[] tags = {Integer.MAX_VALUE, Integer.MAX_VALUE - 1, 0x0001_1234, 0x0002_1234, 0x0101_1234, 1 << 30, 1024};
        MemoryBuffer src = buffer(64L * tags.length);
        MemoryBuffer dst = buffer(64L * tags.length);
        for (int i = 0; i < tags.length; i++) {
            fill(src, 64L * i, 64, 100 + i);
            ab.send(tags[i], src, 64L * i, 64);
        }
        for (int i = tags.length - 1; i >= 0; i--) {
            ba.recv(tags[i], dst, 64L * i, 64, Duration.ofSeconds(30));
            verify(dst, 64L * i, 64, 100 + i);
        }
        MemoryBuffer one = buffer(8);
        fill(src, 0, 8, 7);
        ab.send(Integer.MAX_VALUE, src, 0, 8);
        Connection c = b.recvConnect(Integer.MAX_VALUE, one, 0, 8, Duration.ofSeconds(30));
        assertThat(c.peer()).isEqualTo(a.localAddress());
        verify(one, 0, 8, 7);
    }
}
