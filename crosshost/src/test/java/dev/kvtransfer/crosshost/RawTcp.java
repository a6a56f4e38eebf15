package dev.kvtransfer.crosshost;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The raw baseline of a namespace link, measured in the same run as ours: a plain TCP stream of the same size
 * from side a to side b ({@link InNamespaceMain} {@code tcp-source} / {@code tcp-sink}, one connection per
 * transfer, direct buffers, no verification), timed on the receiving side from accept to end of stream.
 */
final class RawTcp implements AutoCloseable {
    private static final int PORT = 5201; // inside our own namespace: nothing else listens there
    private final NetnsJvm sink;
    private final NetnsJvm source;
    private boolean listening;

    private RawTcp(NetnsJvm sink, NetnsJvm source) {
        this.sink = sink;
        this.source = source;
    }

    /**
     * Starts the sink (side b) and the source (side a); neither is waited for here.
     *
     * @param net   the link
     * @param label names the logs
     * @return the pair of processes
     * @throws IOException if one cannot start
     */
    static RawTcp start(NetnsPair net, String label) throws IOException {
        Path logs = Path.of("target", "netns-logs");
        NetnsJvm sink = NetnsJvm.start(net.b(), label + "-raw-sink", InNamespaceMain.class, List.of(),
                List.of("tcp-sink", net.b().address(), Integer.toString(PORT)), logs);
        try {
            return new RawTcp(sink, NetnsJvm.start(net.a(), label + "-raw-source", InNamespaceMain.class, List.of(),
                    List.of("tcp-source", net.b().address(), Integer.toString(PORT)), logs));
        } catch (IOException | RuntimeException e) {
            sink.close();
            throw e;
        }
    }

    /**
     * Streams {@code count} times {@code bytes} and reports the times like ours ({@link CrossHostPair#summary}).
     *
     * @param variant e.g. {@code "raw-tcp veth 200mbit"}
     * @param count   streams
     * @param bytes   bytes each
     * @return receive time of each, ns
     * @throws IOException if a child's stdin is closed
     */
    List<Long> measure(String variant, int count, long bytes) throws IOException {
        if (!listening) {
            sink.awaitLine("LISTENING", CrossHostPair.WAIT);
            listening = true;
        }
        long t0 = System.nanoTime();
        List<Long> nanos = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            source.tell("SEND " + bytes);
            String[] w = sink.awaitLine("RECEIVED ", CrossHostPair.WAIT).split(" ");
            assertThat(Long.parseLong(w[0])).as("raw bytes received").isEqualTo(bytes);
            nanos.add(Long.parseLong(w[1]));
            source.awaitLine("SENT " + bytes, CrossHostPair.WAIT);
        }
        CrossHostPair.report(CrossHostPair.summary(variant, nanos, bytes, System.nanoTime() - t0));
        return nanos;
    }

    @Override
    public void close() {
        source.close();
        sink.close();
    }
}
