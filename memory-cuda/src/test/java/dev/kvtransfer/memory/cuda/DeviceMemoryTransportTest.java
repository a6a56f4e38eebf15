package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.EnumSet;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Core hands the connection manager's {@link ConnectionManager#capabilities()} to every session, so a transport
 * that declares {@code DEVICE_MEMORY} (UCX built with CUDA) gets the device pool itself, zero copy, and one that
 * does not gets pinned staging. The transport here is the loopback behind a manager that declares
 * {@code DEVICE_MEMORY} or not; the fake runtime's device memory is host memory, so the wrapper passes a device
 * buffer on as a host view of the same bytes and counts it. TP1 to TP1 between layer-nhd pools: both sides direct.
 */
class DeviceMemoryTransportTest {
    private static final AtomicLong FABRICS = new AtomicLong();

    private static CudaBufferManager fake() {
        return new CudaBufferManager(new FakeCudaRuntime(0), TimeUnit.SECONDS.toNanos(10),
                CudaBufferManager.HOST_ALLOC_LIMIT, false);
    }

    @ParameterizedTest(name = "transport declares DEVICE_MEMORY: {0}")
    @ValueSource(booleans = {true, false})
    void theManagersCapabilitiesDecideWhetherTheDevicePoolGoesToTheTransportItself(boolean deviceMemory) {
        CacheState state = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(32).tokensPerBlock(8)
                .dataType(DataType.FLOAT16).poolLayout(PoolLayout.LAYER_NHD).build();
        LongAdder deviceBuffers = new LongAdder();
        TransportProvider provider = new DeclaringProvider(new LoopbackTransportProvider(), deviceMemory,
                deviceBuffers);
        TransportConfig base = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(20))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "device-caps-" + FABRICS.incrementAndGet())
                .build();
        try (LocalInstance ctx = LocalInstance.builder("ctx", state).transport(provider, base)
                .memory(DeviceMemoryTransportTest::fake, MemoryKind.DEVICE).blocksPerRank(32).start();
             LocalInstance gen = LocalInstance.builder("gen", state).transport(provider, base)
                     .memory(DeviceMemoryTransportTest::fake, MemoryKind.DEVICE).blocksPerRank(32).start()) {
            long id = 91_000 + (deviceMemory ? 1 : 0);
            int prompt = 100;
            int total = BlockDistribution.blocksFor(prompt, state.tokensPerBlock());
            int[] ctxIds = ctx.cache(0).allocate(id, total);
            KvPattern.fill(ctx.cache(0), ctx.bufferManager(0), ctxIds, ctx.cacheState(0), 0, id, total);
            int[] genIds = gen.cache(0).allocate(id, total);
            KvPattern.fill(gen.cache(0), gen.bufferManager(0), genIds, gen.cacheState(0), 0, id + 7, total);
            ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
            TransferRequest c = TransferRequest.context(id, prompt, ctxIds);
            TransferRequest g = TransferRequest.generation(params, prompt, genIds);
            ctx.transceiver(0).respondAndSendAsync(c);
            gen.transceiver(0).requestAndReceiveAsync(g);
            await("request " + id).atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(10))
                    .until(() -> c.isDone() && g.isDone());
            assertThat(c.state()).as("%s", c).isEqualTo(RequestState.CONTEXT_COMPLETE);
            assertThat(g.state()).as("%s", g).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.verify(gen.cache(0), gen.bufferManager(0), genIds, gen.cacheState(0), 0, id, total)
                    .assertOk();
            if (deviceMemory) {
                assertThat(deviceBuffers.sum()).as("device buffers handed to a DEVICE_MEMORY transport (zero copy)")
                        .isPositive();
            } else {
                assertThat(deviceBuffers.sum()).as("device buffers handed to a transport without DEVICE_MEMORY")
                        .isZero();
            }
            ctx.cache(0).free(id);
            gen.cache(0).free(id);
        }
    }

    /** The loopback provider, its managers declaring {@code DEVICE_MEMORY} or nothing. */
    private record DeclaringProvider(TransportProvider inner, boolean deviceMemory, LongAdder deviceBuffers)
            implements TransportProvider {
        @Override
        public String name() {
            return inner.name();
        }

        @Override
        public boolean isAvailable() {
            return inner.isAvailable();
        }

        @Override
        public String unavailabilityCause() {
            return inner.unavailabilityCause();
        }

        @Override
        public Set<TransportCapability> capabilities() {
            Set<TransportCapability> c = EnumSet.copyOf(inner.capabilities());
            if (deviceMemory) {
                c.add(TransportCapability.DEVICE_MEMORY);
            }
            return c;
        }

        @Override
        public ConnectionManager create(TransportConfig config) {
            return new DeclaringManager(inner.create(config), deviceMemory, deviceBuffers);
        }
    }

    private record DeclaringManager(ConnectionManager inner, boolean deviceMemory, LongAdder deviceBuffers)
            implements ConnectionManager {
        @Override
        public String localAddress() {
            return inner.localAddress();
        }

        @Override
        public Duration defaultTimeout() {
            return inner.defaultTimeout();
        }

        @Override
        public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
            Connection c = inner.pollConnect(tag, host(buffer), offset, length, wait);
            return c == null ? null : new DeclaringConnection(c, this);
        }

        @Override
        public Connection connection(String address) {
            return new DeclaringConnection(inner.connection(address), this);
        }

        @Override
        public boolean isRunning() {
            return inner.isRunning();
        }

        @Override
        public void close() {
            inner.close();
        }

        @Override
        public Set<TransportCapability> capabilities() {
            return deviceMemory ? Set.of(TransportCapability.DEVICE_MEMORY) : Set.of();
        }

        /** A device buffer (host memory on the fake runtime) as a host view of the same bytes, counted. */
        MemoryBuffer host(MemoryBuffer b) {
            if (b.kind() != MemoryKind.DEVICE) {
                return b;
            }
            deviceBuffers.increment();
            return new HostView(b.address(), b.size());
        }
    }

    private record DeclaringConnection(Connection inner, DeclaringManager manager) implements Connection {
        @Override
        public Duration defaultTimeout() {
            return inner.defaultTimeout();
        }

        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            inner.send(tag, manager.host(buffer), offset, length, timeout);
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            inner.recv(tag, manager.host(buffer), offset, length, timeout);
        }

        @Override
        public String peer() {
            return inner.peer();
        }

        @Override
        public int copiesPerByte(long length) {
            return inner.copiesPerByte(length);
        }

        @Override
        public int writeCopiesPerByte(long length) {
            return inner.writeCopiesPerByte(length);
        }
    }

    private record HostView(long address, long size) implements MemoryBuffer {
        @Override
        public MemoryKind kind() {
            return MemoryKind.HOST;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            Objects.checkFromIndexSize(offset, length, size);
            return new HostView(address + offset, length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("a test view of fake device memory");
        }

        @Override
        public void close() {
        }
    }
}
