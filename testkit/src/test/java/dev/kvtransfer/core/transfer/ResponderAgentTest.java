package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.protocol.RequestHeaderFlyweight;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The context side's responder is an agent that never blocks, and over a transport that posts receives no thread
 * waits for a request info. The transport (loopback, which posts) is wrapped to record every {@code pollConnect}
 * the responder makes on {@link Tags#ID_TAG}: each made by its duty cycle has a zero wait (only its idle strategy
 * waits, in the transport), and they go on while the rank is idle (the duty cycle returns and is called again).
 * Requesters that send headers and never their infos then leave no thread in a receive: the info threads are idle
 * in their pool and no thread's stack is in the intake's reads, while a genuine request is served and verified;
 * the missing infos are reported {@code TIMEOUT} after the control timeout, each naming its request.
 */
@Timeout(60)
class ResponderAgentTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private final RecordingProvider transport = new RecordingProvider(new LoopbackTransportProvider());
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void after() {
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name) {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).build();
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        LocalInstance i = LocalInstance.builder(name, s).transport(transport, TransportConfig.builder().build())
                .formatter(new WholeBlockFormatterProvider()).config(c).blocksPerRank(256).errorHandler(errors::add)
                .start();
        instances.add(i);
        return i;
    }

    @Test
    void responderPollsWithoutWaitingAndNoThreadWaitsForAnInfo() {
        LocalInstance ctx = start("ctx");
        LocalInstance gen = start("gen");
        int prompt = 24;
        int blocks = BlockDistribution.blocksFor(prompt, 4);
        long id = 7;
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        TransferRequest genReq = TransferRequest.generation(ctx.contextPhaseParams(id, 0), prompt, g);
        ctx.transceiver(0).respondAndSendAsync(TransferRequest.context(id, prompt, c));

        // The responder runs: its duty cycle returns while nothing arrives (the idle strategy calls it again).
        String ctxAddress = ctx.commState().addresses().get(0);
        long polls = transport.idPolls(ctxAddress);
        await().atMost(BOUND).until(() -> transport.idPolls(ctxAddress) > polls + 10);

        List<ConnectionManager> silent = new ArrayList<>();
        try (HostBufferManager bm = new HostBufferManager();
             MemoryBuffer header = bm.allocate(RequestHeaderFlyweight.LENGTH, MemoryKind.HOST)) {
            for (int k = 0; k < 3; k++) {
                ConnectionManager m = transport.create(TransportConfig.builder().build());
                silent.add(m);
                new RequestHeaderFlyweight().wrap(header.asByteBuffer(), 0).requestSend(200, 900 + k,
                        Tags.FIRST_DATA_TAG + k);
                m.connection(ctxAddress).send(Tags.ID_TAG, header, 0, RequestHeaderFlyweight.LENGTH, BOUND);
            }
            // The genuine request's header comes after the silent ones: when it is served they were taken.
            gen.transceiver(0).requestAndReceiveAsync(genReq);
            await().atMost(BOUND).until(genReq::isDone);
            assertThat(genReq.state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.Result r = KvPattern.verify(gen.cache(0), g, gen.cacheState(0), 0, id, blocks);
            assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
            assertThat(r.checkedElements()).isPositive();
            assertThat(silentHeadersReported()).as("missing infos given up on before the control timeout").isZero();

            // Three infos are announced and missing: no thread waits for one. The info threads (they serve infos
            // whose receives completed) are idle in their pool, none is in the intake's blocking read.
            await().atMost(BOUND).until(() -> Thread.getAllStackTraces().entrySet().stream()
                    .filter(e -> e.getKey().getName().contains("-info-"))
                    .allMatch(e -> inStack(e.getValue(), ThreadPoolExecutor.class.getName(), "getTask")));
            Map<Thread, StackTraceElement[]> threads = Thread.getAllStackTraces();
            assertThat(threads.values()).as("threads in the intake's blocking read").noneMatch(stack ->
                    inStack(stack, InfoIntake.class.getName(), "readInfo")
                            || inStack(stack, InfoIntake.class.getName(), "drain"));
            assertThat(threads.keySet()).as("the responder").anyMatch(t -> t.getName().endsWith("-responder"));

            await().atMost(BOUND).until(() -> silentHeadersReported() >= 3);
            for (long silentId = 900; silentId < 903; silentId++) {
                long want = silentId;
                assertThat(errors).anySatisfy(e -> {
                    assertThat(e).isInstanceOf(KvTransferException.class);
                    assertThat(((KvTransferException) e).requestId()).isEqualTo(want);
                    assertThat(e.getMessage()).contains("request " + want).contains("did not arrive");
                });
            }
        } finally {
            silent.forEach(ConnectionManager::close);
        }
        assertThat(transport.nonZeroIdWaits(ctxAddress)).as("pollConnect calls on ID_TAG with a wait in doWork")
                .isZero();

        // The rank still serves.
        long id2 = 8;
        int[] c2 = ctx.cache(0).allocate(id2, blocks);
        KvPattern.fill(ctx.cache(0), c2, ctx.cacheState(0), 0, id2, blocks);
        int[] g2 = gen.cache(0).allocate(id2, blocks);
        TransferRequest genReq2 = TransferRequest.generation(ctx.contextPhaseParams(id2, 0), prompt, g2);
        ctx.transceiver(0).respondAndSendAsync(TransferRequest.context(id2, prompt, c2));
        gen.transceiver(0).requestAndReceiveSync(genReq2);
        KvPattern.Result r2 = KvPattern.verify(gen.cache(0), g2, gen.cacheState(0), 0, id2, blocks);
        assertThat(r2.mismatches()).as(r2.firstMismatch()).isZero();
        assertThat(transport.nonZeroIdWaits(ctxAddress)).isZero();
    }

    private long silentHeadersReported() {
        return errors.stream().filter(e -> e instanceof KvTransferException k && k.code() == ErrorCode.TIMEOUT
                && k.getMessage().contains("did not arrive")).count();
    }

    private static boolean inStack(StackTraceElement[] stack, String className, String method) {
        return List.of(stack).stream().anyMatch(f -> f.getClassName().equals(className)
                && f.getMethodName().equals(method));
    }

    /** @return whether the calling thread is in the responder's duty cycle (not its idle strategy's wait) */
    private static boolean inDutyCycle() {
        return StackWalker.getInstance().walk(frames -> frames.anyMatch(f -> f.getMethodName().equals("doWork")
                && f.getClassName().equals(InfoIntake.Responder.class.getName())));
    }

    /**
     * A provider whose managers count the {@code pollConnect} calls on {@link Tags#ID_TAG}, and those with a wait
     * made inside the responder's duty cycle.
     */
    static final class RecordingProvider implements TransportProvider {
        private final TransportProvider delegate;
        private final Map<String, AtomicLong> idPolls = new ConcurrentHashMap<>();
        private final Map<String, AtomicLong> nonZeroIdWaits = new ConcurrentHashMap<>();

        RecordingProvider(TransportProvider delegate) {
            this.delegate = delegate;
        }

        long idPolls(String address) {
            return idPolls.computeIfAbsent(address, a -> new AtomicLong()).get();
        }

        long nonZeroIdWaits(String address) {
            return nonZeroIdWaits.computeIfAbsent(address, a -> new AtomicLong()).get();
        }

        @Override
        public String name() {
            return delegate.name();
        }

        @Override
        public boolean isAvailable() {
            return delegate.isAvailable();
        }

        @Override
        public String unavailabilityCause() {
            return delegate.unavailabilityCause();
        }

        @Override
        public Set<TransportCapability> capabilities() {
            return delegate.capabilities();
        }

        @Override
        public ConnectionManager create(TransportConfig config) {
            ConnectionManager real = delegate.create(config);
            AtomicLong polls = idPolls.computeIfAbsent(real.localAddress(), a -> new AtomicLong());
            AtomicLong waits = nonZeroIdWaits.computeIfAbsent(real.localAddress(), a -> new AtomicLong());
            return new ConnectionManager() {
                @Override
                public String localAddress() {
                    return real.localAddress();
                }

                @Override
                public Duration defaultTimeout() {
                    return real.defaultTimeout();
                }

                @Override
                public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length,
                                              Duration wait) {
                    if (tag == Tags.ID_TAG) {
                        polls.incrementAndGet();
                        if (!wait.isZero() && inDutyCycle()) {
                            waits.incrementAndGet();
                        }
                    }
                    return real.pollConnect(tag, buffer, offset, length, wait);
                }

                @Override
                public Connection connection(String address) {
                    return real.connection(address);
                }

                @Override
                public RegisteredRegion register(MemoryBuffer memory) {
                    return real.register(memory);
                }

                @Override
                public RegisteredRegion register(MemoryBuffer memory, Set<String> writers) {
                    return real.register(memory, writers);
                }

                @Override
                public Set<TransportCapability> capabilities() {
                    return real.capabilities();
                }

                @Override
                public boolean isRunning() {
                    return real.isRunning();
                }

                @Override
                public void close() {
                    real.close();
                }

                @Override
                public int preferredResponderInfoWaitMicros() {
                    return real.preferredResponderInfoWaitMicros();
                }
            };
        }
    }
}
