package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.CopyLedger;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Which pulls take the one-copy path: the Aeron manager's answer per address ({@code oneCopyWritesFrom}), and the
 * rule that a request pulls two-sided on every rank as soon as one rank of either instance is not local, so the
 * generation ranks of one request agree (the context side would refuse a request whose generation ranks disagree),
 * and the size floor under which a local pull moves as messages ({@code kvtransfer.localOneCopyMinBytes}). Every
 * transfer is verified element by element with KvPattern.
 */
class AeronOneCopyPullRuleTest {
    private static final byte[] SECRET = "kvtransfer-one-copy-pull-rule-secret".getBytes(StandardCharsets.UTF_8);
    private static final Duration T = Duration.ofSeconds(30);
    /** The floor of the size tests: 8 blocks of {@link #state}'s model (128 KiB a block). */
    private static final long FLOOR = 1L << 20;
    private final List<AutoCloseable> open = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();
    /** Addresses the managers of this test take for another host's. */
    private final Set<String> remote = ConcurrentHashMap.newKeySet();

    @AfterEach
    void close() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        assertThat(errors).isEmpty();
    }

    private AeronConnectionManager manager(byte[] secret, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().defaultTimeout(T).authSecret(secret);
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
        open.add(m);
        return m;
    }

    @Test
    void aManagerExpectsOneCopyFromPeersOfItsHostOnlyWithTheSecretAndThePathOn() {
        AeronConnectionManager a = manager(SECRET);
        AeronConnectionManager b = manager(SECRET);
        assertThat(a.oneCopyWritesFrom(b.localAddress())).as("a peer on this driver").isTrue();
        assertThat(a.oneCopyWritesFrom(a.localAddress())).as("itself").isTrue();
        assertThat(a.oneCopyWritesFrom("192.0.2.7:40123/inc/1f")).as("a peer of another host").isFalse();
        AeronConnectionManager open = manager(null);
        assertThat(open.oneCopyWritesFrom(b.localAddress())).as("without a deployment secret").isFalse();
        AeronConnectionManager off = manager(SECRET, AeronSettings.SHARED_MEMORY_WRITES, "false");
        assertThat(off.oneCopyWritesFrom(b.localAddress())).as("aeron.sharedMemoryWrites=false").isFalse();
    }

    /**
     * One rank of the request's instances is taken for another host's: every generation rank pulls two-sided (no
     * byte through shared memory, nothing pushed); with every rank local the same request moves by one-copy writes.
     */
    @ParameterizedTest(name = "ctx TP{0} -> gen TP{1}, remote: {2} rank {3}")
    @CsvSource({"2,1,ctx,1", "1,2,gen,1", "1,2,ctx,0", "2,2,none,0"})
    void aRequestWithARemoteRankPullsOnEveryRank(int ctxTp, int genTp, String side, int rank) {
        CacheState ctxState = state(ctxTp);
        CacheState genState = state(genTp);
        LocalInstance ctx = start("ctx", ctxState, 0);
        LocalInstance gen = start("gen", genState, 0);
        if (!side.equals("none")) {
            remote.add((side.equals("ctx") ? ctx : gen).commState().addresses().get(rank));
        }
        boolean local = remote.isEmpty();
        long copied = ShmWriter.copiedBytes();
        Transfer t = TransferFixture.moveExact(ctx, gen, ctxState, genState, 16 * 20 + 5, 0, T);
        TransferFixture.assertPushed(t, local);
        long shared = ShmWriter.copiedBytes() - copied;
        if (local) {
            assertThat(shared).as("bytes through shared memory").isPositive();
        } else {
            assertThat(shared).as("bytes through shared memory").isZero();
        }
        TransferFixture.free(ctx, gen, t);
    }

    /**
     * A local pull moves as one-copy writes only from {@link #FLOOR} on, counted as the blocks to move (prompt blocks
     * less reused ones) times the whole model's bytes per block (8 layers x 4 KV heads x 16 tokens x 64 x K,V x 2
     * bytes = 128 KiB): below it as messages, nothing pushed and no byte through shared memory. On a generation
     * side of two uneven PP stages (6 + 2 layers: 96 and 32 KiB of each block) both ranks take one copy from 8
     * blocks on, for neither counts only its own share; a rule that did would keep 8 blocks on messages and split
     * the ranks at 11 (1056 and 352 KiB), and the context side would refuse the request.
     */
    @ParameterizedTest(name = "gen PP{0}, prompt {1} tokens, {2} reused: one copy {3}")
    @CsvSource({"1,112,0,false", "1,113,0,true", "1,144,2,false", "1,160,2,true", "2,112,0,false",
        "2,128,0,true", "2,176,0,true"})
    void aLocalPullBelowTheFloorMovesAsMessages(int genPp, int prompt, int reused, boolean oneCopy) {
        CacheState ctxState = state(1);
        CacheState genState = genPp == 1 ? state(1) : state(1).toBuilder().pipelineParallelism(2)
                .attentionLayersPerPp(List.of(6, 2)).build();
        LocalInstance ctx = start("ctx", ctxState, FLOOR);
        LocalInstance gen = start("gen", genState, FLOOR);
        long copied = ShmWriter.copiedBytes();
        Transfer t = TransferFixture.moveExact(ctx, gen, ctxState, genState, prompt, reused, T);
        CopyLedger sent = CopyLedger.NONE;
        for (TransferRequest r : t.all()) {
            if (r.isContext()) {
                sent = sent.plus(r.copyLedger());
            } else {
                assertThat(r.wasPushed()).as("%s moved by one-copy writes", r).isEqualTo(oneCopy);
            }
        }
        assertThat(sent.bytes()).as("bytes the context side sent").isPositive();
        assertThat(ShmWriter.copiedBytes() - copied).as("bytes through shared memory")
                .isEqualTo(oneCopy ? sent.bytes() : 0);
        TransferFixture.free(ctx, gen, t);
    }

    private LocalInstance start(String name, CacheState s, long oneCopyFloor) {
        LocalInstance i = LocalInstance.builder(name, s)
                .transport(new RemoteMarking(), TransportConfig.builder().authSecret(SECRET).build())
                .formatter(Plugins.discover().formatterFor(s.attentionType()))
                .config(TransceiverConfig.builder().backend("aeron").kvTransferTimeout(T)
                        .localOneCopyMinBytes(oneCopyFloor).build()).blocksPerRank(64)
                .errorHandler(errors::add).start();
        open.add(i);
        return i;
    }

    private static CacheState state(int tp) {
        return CacheState.builder().uniformKvHeads(8, 4).sizePerHead(64).tokensPerBlock(16).tensorParallelism(tp)
                .build();
    }

    /** Aeron, whose managers take the addresses in {@link #remote} for another host's. */
    private final class RemoteMarking implements TransportProvider {
        private final AeronTransportProvider real = new AeronTransportProvider();

        @Override
        public String name() {
            return real.name();
        }

        @Override
        public boolean isAvailable() {
            return real.isAvailable();
        }

        @Override
        public String unavailabilityCause() {
            return real.unavailabilityCause();
        }

        @Override
        public Set<TransportCapability> capabilities() {
            return real.capabilities();
        }

        @Override
        public ConnectionManager create(TransportConfig config) {
            ConnectionManager m = real.create(config);
            return new ConnectionManager() {
                @Override
                public String localAddress() {
                    return m.localAddress();
                }

                @Override
                public Duration defaultTimeout() {
                    return m.defaultTimeout();
                }

                @Override
                public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
                    return m.pollConnect(tag, buffer, offset, length, wait);
                }

                @Override
                public Connection connection(String address) {
                    return m.connection(address);
                }

                @Override
                public RegisteredRegion register(MemoryBuffer memory) {
                    return m.register(memory);
                }

                @Override
                public RegisteredRegion register(MemoryBuffer memory, Set<String> writers) {
                    return m.register(memory, writers);
                }

                @Override
                public boolean oneCopyWritesFrom(String address) {
                    return !remote.contains(address) && !remote.contains(m.localAddress())
                            && m.oneCopyWritesFrom(address);
                }

                @Override
                public Set<TransportCapability> capabilities() {
                    return m.capabilities();
                }

                @Override
                public int preferredResponderInfoWaitMicros() {
                    return m.preferredResponderInfoWaitMicros();
                }

                @Override
                public boolean isRunning() {
                    return m.isRunning();
                }

                @Override
                public void close() {
                    m.close();
                }
            };
        }
    }
}
