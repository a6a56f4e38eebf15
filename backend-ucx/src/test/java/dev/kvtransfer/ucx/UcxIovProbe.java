package dev.kvtransfer.ucx;

import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.UcxUtils;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A probe of raw jucx, not of this backend: how fast one batch of {@code n} entries of {@code k} KiB moves between
 * two processes when each entry is its own posted tagged message ({@code each}), when the batch is one message of
 * UCX's IOV datatype ({@code iov}: {@code sendTaggedNonBlocking(long[], long[], ...)} against a vectored receive
 * whose entries lie in reverse order), when it is one contiguous message of the same bytes ({@code contig}), and
 * when each entry is its own message and each side waits for one before it posts the next ({@code seq}).
 * The receiver prints GB/s per round of 8 batches (the first round is a warm-up and not printed). Both processes
 * busy-progress one worker each. The decision it informed: docs/decisions/2026-12-05-gathered-small-entries-in-
 * emulated-writes.md.
 *
 * <pre>
 * java -cp ... dev.kvtransfer.ucx.UcxIovProbe KIB N each|iov|contig|seq ROUNDS recv ADDRFILE &amp;
 * java -cp ... dev.kvtransfer.ucx.UcxIovProbe KIB N each|iov|contig|seq ROUNDS send ADDRFILE
 * </pre>
 */
public final class UcxIovProbe {
    private static final int BATCHES = 8;
    private static final long TAG = 7;

    private UcxIovProbe() {
    }

    public static void main(String[] a) throws Exception {
        int entry = Integer.parseInt(a[0]) * 1024;
        int n = Integer.parseInt(a[1]);
        String mode = a[2];
        int rounds = Integer.parseInt(a[3]);
        boolean receiver = a[4].equals("recv");
        Path addressFile = Path.of(a[5]);
        long total = (long) entry * n;
        try (UcpContext ctx = new UcpContext(new UcpParams().requestTagFeature());
             UcpWorker w = ctx.newWorker(new UcpWorkerParams())) {
            ByteBuffer buf = ByteBuffer.allocateDirect(Math.toIntExact(total));
            long base = UcxUtils.getAddress(buf);
            long[] addr = new long[n];
            long[] sizes = new long[n];
            for (int i = 0; i < n; i++) {
                addr[i] = base + (long) (receiver ? n - 1 - i : i) * entry;
                sizes[i] = entry;
            }
            UcpEndpoint ep = null;
            if (receiver) {
                ByteBuffer own = w.getAddress();
                byte[] b = new byte[own.remaining()];
                own.get(b);
                Path tmp = Path.of(a[5] + ".tmp");
                Files.write(tmp, b);
                Files.move(tmp, addressFile, StandardCopyOption.ATOMIC_MOVE);
            } else {
                for (int i = 0; i < 1000 && !Files.exists(addressFile); i++) {
                    Thread.sleep(10);
                }
                byte[] b = Files.readAllBytes(addressFile);
                ByteBuffer peer = ByteBuffer.allocateDirect(b.length);
                peer.put(b).flip();
                ep = w.newEndpoint(new UcpEndpointParams().setUcpAddress(peer));
            }
            AtomicInteger left = new AtomicInteger();
            UcxCallback done = new UcxCallback() {
                @Override
                public void onSuccess(UcpRequest request) {
                    left.decrementAndGet();
                }

                @Override
                public void onError(int status, String message) {
                    System.err.println("failed: " + message);
                    left.decrementAndGet();
                }
            };
            for (int r = 0; r <= rounds; r++) {
                long t0 = System.nanoTime();
                for (int k = 0; k < BATCHES; k++) {
                    if (mode.equals("iov")) {
                        left.incrementAndGet();
                        if (ep == null) {
                            w.recvTaggedNonBlocking(addr, sizes, TAG, -1L, done);
                        } else {
                            ep.sendTaggedNonBlocking(addr, sizes, TAG, done);
                        }
                    } else if (mode.equals("seq")) {
                        for (int i = 0; i < n; i++) {
                            left.incrementAndGet();
                            if (ep == null) {
                                w.recvTaggedNonBlocking(addr[i], entry, TAG, -1L, done);
                            } else {
                                ep.sendTaggedNonBlocking(addr[i], entry, TAG, done);
                            }
                            while (left.get() > 0) {
                                w.progress();
                            }
                        }
                    } else if (mode.equals("each")) {
                        left.addAndGet(n);
                        for (int i = 0; i < n; i++) {
                            if (ep == null) {
                                w.recvTaggedNonBlocking(addr[i], entry, TAG, -1L, done);
                            } else {
                                ep.sendTaggedNonBlocking(addr[i], entry, TAG, done);
                            }
                        }
                    } else {
                        left.incrementAndGet();
                        if (ep == null) {
                            w.recvTaggedNonBlocking(base, total, TAG, -1L, done);
                        } else {
                            ep.sendTaggedNonBlocking(base, total, TAG, done);
                        }
                    }
                    while (left.get() > 0) {
                        w.progress();
                    }
                }
                long ns = System.nanoTime() - t0;
                if (receiver && r > 0) {
                    System.out.printf("%s: %d x %d KiB per batch, %.2f GB/s%n", mode, n, entry / 1024,
                            (double) BATCHES * total / ns);
                }
            }
            if (receiver) {
                Files.deleteIfExists(addressFile);
            } else {
                Thread.sleep(200); // let the last rendezvous' acknowledgements leave before the worker closes
                ep.close();
            }
        }
    }
}
