package dev.kvtransfer.aeron.bench;

import dev.kvtransfer.aeron.AeronTransportProvider;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * One small-message round trip through our transport (two managers of one JVM on the shared embedded driver,
 * {@code aeron:ipc}; a thread echoes): send, then receive the echo. With {@code -prof gc},
 * {@code gc.alloc.rate.norm} is the heap allocated per round trip by every thread — caller, echo thread, agent.
 *
 * <pre>
 * java --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED -cp &lt;test class path&gt; org.openjdk.jmh.Main \
 *   MessageBenchmark -prof gc
 * </pre>
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED", "-Xmx1g"})
public class MessageBenchmark {
    private static final int PING = 700;
    private static final int PONG = 701;

    /** Message size: a control message, and one that spans frames. */
    @Param({"64", "65536"})
    public int size;

    private HostBufferManager memory;
    private ConnectionManager a;
    private ConnectionManager b;
    private MemoryBuffer out;
    private MemoryBuffer in;
    private Connection ab;
    private Thread echo;

    @Setup(Level.Trial)
    public void setUp() {
        memory = new HostBufferManager();
        AeronTransportProvider p = new AeronTransportProvider();
        a = p.create(TransportConfig.builder().name("bench-a").defaultTimeout(Duration.ofSeconds(30)).build());
        b = p.create(TransportConfig.builder().name("bench-b").defaultTimeout(Duration.ofSeconds(30)).build());
        out = memory.allocate(size, MemoryKind.HOST);
        in = memory.allocate(size, MemoryKind.HOST);
        MemoryBuffer echoBuf = memory.allocate(size, MemoryKind.HOST);
        ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        echo = new Thread(() -> {
            try {
                while (true) {
                    ba.recv(PING, echoBuf, 0, size, Duration.ofHours(1));
                    ba.send(PONG, echoBuf, 0, size);
                }
            } catch (TransportClosedException e) {
                echoBuf.close();
            }
        }, "bench-echo");
        echo.setDaemon(true);
        echo.start();
    }

    @Benchmark
    public void roundTrip() {
        ab.send(PING, out, 0, size);
        ab.recv(PONG, in, 0, size);
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        a.close();
        b.close();
        echo.join(10_000);
        out.close();
        in.close();
        memory.close();
    }
}
