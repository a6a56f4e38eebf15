package dev.kvtransfer.ucx.bench;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.ucx.UcxTransportProvider;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
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
 * JMH: the UCX transport's per-message cost and allocation, two managers in one JVM (shared memory). With
 * {@code -prof gc}, {@code gc.alloc.rate.norm} is the heap allocated per operation by every thread (callers, the
 * echo thread and both managers' agents): {@code pingPong} is one round trip (4 calls, 4 UCX requests),
 * {@code send} one message to a draining receiver, {@code write} one one-sided write (puts + flush) of an already
 * validated region. Run as the README says; not a unit test.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"-Xmx1g"})
public class UcxMessageBenchmark {
    private static final int PING = 1 << 10;
    private static final int PONG = (1 << 10) + 1;
    private static final int DATA = (1 << 10) + 2;

    /** Message size of {@code send} and {@code write}, bytes. */
    @Param({"8", "1048576"})
    public int size;

    private HostBufferManager memory;
    private ConnectionManager a;
    private ConnectionManager b;
    private Connection ab;
    private MemoryBuffer out;
    private MemoryBuffer in;
    private Thread echo;
    private Thread drain;
    private volatile boolean stop;
    private RegisteredRegion region;
    private RegionDescriptor descriptor;
    private final WriteBatch batch = new WriteBatch();
    private static final Duration WRITE_TIMEOUT = Duration.ofSeconds(30);

    @Setup
    public void setUp() {
        memory = new HostBufferManager();
        UcxTransportProvider p = new UcxTransportProvider();
        // `write` measures the native path (puts + flush), as the README's table says; the default emulates in shm.
        a = p.create(TransportConfig.builder().name("jmh-a").defaultTimeout(Duration.ofSeconds(30))
                .property(dev.kvtransfer.ucx.UcxSettings.ONE_SIDED, "native").build());
        b = p.create(TransportConfig.builder().name("jmh-b").defaultTimeout(Duration.ofSeconds(30))
                .property(dev.kvtransfer.ucx.UcxSettings.ONE_SIDED, "native").build());
        ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        out = memory.allocate(Math.max(size, 8), MemoryKind.HOST);
        in = memory.allocate(Math.max(size, 8), MemoryKind.HOST);
        MemoryBuffer echoBuf = memory.allocate(8, MemoryKind.HOST);
        MemoryBuffer drainBuf = memory.allocate(Math.max(size, 8), MemoryKind.HOST);
        Duration wait = Duration.ofSeconds(30);
        echo = new Thread(() -> {
            try {
                while (!stop) {
                    ba.recv(PING, echoBuf, 0, 8, wait);
                    ba.send(PONG, echoBuf, 0, 8, wait);
                }
            } catch (RuntimeException e) {
                // closed at tear-down
            }
        }, "jmh-echo");
        echo.setDaemon(true);
        echo.start();
        drain = new Thread(() -> {
            try {
                while (!stop) {
                    ba.recv(DATA, drainBuf, 0, size, wait);
                }
            } catch (RuntimeException e) {
                // closed at tear-down
            }
        }, "jmh-drain");
        drain.setDaemon(true);
        drain.start();
        MemoryBuffer target = memory.allocate(Math.max(size, 8), MemoryKind.HOST);
        region = b.register(target);
        descriptor = region.descriptor();
        batch.add(out, 0, descriptor, 0, size);
        ab.write(batch, wait); // validated once, cached after
    }

    @TearDown
    public void tearDown() {
        stop = true;
        region.close();
        a.close();
        b.close();
    }

    @Benchmark
    public void pingPong() {
        ab.send(PING, out, 0, 8);
        ab.recv(PONG, in, 0, 8);
    }

    @Benchmark
    public void send() {
        ab.send(DATA, out, 0, size);
    }

    @Benchmark
    public void write() {
        ab.write(batch, WRITE_TIMEOUT);
    }
}
