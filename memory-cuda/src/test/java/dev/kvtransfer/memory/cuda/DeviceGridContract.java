package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.formatter.mla.MlaFormatterProvider;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.params.provider.Arguments.arguments;

/**
 * The formatter conformance grid with device pools: the standard formatter re-sharding TP, PP and CP and
 * the MLA formatter with attention DP and generation CP, over several pool-layout pairs, pull and push, through
 * {@link DevicePoolTransfer} (core's session and staging pool, loopback transport). Every case verifies every
 * generation element with KvPattern and asserts what reached the transport: no {@code DEVICE} buffer where the
 * transport lacks {@code DEVICE_MEMORY} (the loopback's case, and Aeron's, MPI's, Debian's UCX's); the pool's own
 * device memory (zero copy) where it declares it. Runs on the fake runtime here ({@link DeviceGridOnFakeRuntimeTest})
 * and on a GPU ({@link DeviceGridGpuTest}, from {@code scripts/gpu-check.sh}).
 */
abstract class DeviceGridContract {
    private static final MemoryKind D = MemoryKind.DEVICE;
    private static final MemoryKind H = MemoryKind.HOST;

    protected CudaBufferManager memory;

    protected abstract CudaBufferManager newManager();

    @BeforeEach
    void open() {
        memory = newManager();
    }

    @AfterEach
    void close() {
        memory.close(); // refuses, naming them, when a pool, staging slot or control buffer leaked
    }

    private static CacheState.Builder standard(int tp, int pp, int cp, PoolLayout pool) {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(32).tokensPerBlock(8).dataType(DataType.FLOAT16)
                .tensorParallelism(tp).pipelineParallelism(pp).contextParallelism(cp).poolLayout(pool);
    }

    private static CacheState.Builder mla(int tp, int cp, PoolLayout pool) {
        return CacheState.builder().uniformKvHeads(4, 1).sizePerHead(64).tokensPerBlock(8)
                .dataType(DataType.BFLOAT16).attentionType(AttentionType.MLA).kvFactor(1).tensorParallelism(tp)
                .contextParallelism(cp).poolLayout(pool);
    }

    static Stream<Arguments> pulls() {
        PoolLayout b = PoolLayout.BLOCK;
        PoolLayout nhd = PoolLayout.LAYER_NHD;
        PoolLayout hnd = PoolLayout.LAYER_HND;
        FormatterProvider std = new StandardFormatterProvider();
        FormatterProvider mla = new MlaFormatterProvider();
        return Stream.of(
                arguments("std TP1 -> TP1, block -> block (direct plan)", std, standard(1, 1, 1, b).build(),
                        standard(1, 1, 1, b).build()),
                arguments("std TP2 -> TP1, block -> block", std, standard(2, 1, 1, b).build(),
                        standard(1, 1, 1, b).build()),
                arguments("std TP1 -> TP2, layer-nhd -> layer-hnd", std, standard(1, 1, 1, nhd).build(),
                        standard(2, 1, 1, hnd).build()),
                arguments("std TP1 -> TP1, layer-hnd -> layer-hnd (coalesced runs)", std,
                        standard(1, 1, 1, hnd).build(), standard(1, 1, 1, hnd).build()),
                arguments("std PP2 -> PP1, layer-hnd -> block", std, standard(1, 2, 1, hnd).build(),
                        standard(1, 1, 1, b).build()),
                arguments("std TP2 -> TP1 PP2, block -> layer-nhd", std, standard(2, 1, 1, b).build(),
                        standard(1, 2, 1, nhd).build()),
                arguments("std ctx CP2 -> TP2, block -> block", std, standard(1, 1, 2, b).build(),
                        standard(2, 1, 1, b).build()),
                arguments("std TP2 -> gen CP2, layer-nhd -> block", std, standard(2, 1, 1, nhd).build(),
                        standard(1, 1, 2, b).build()),
                arguments("mla TP2 -> TP2 attention DP, block -> layer-nhd", mla, mla(2, 1, b).build(),
                        mla(2, 1, nhd).attentionDp(true, 0, 2).build()),
                arguments("mla TP1 -> gen CP2, layer-nhd -> block", mla, mla(1, 1, nhd).build(),
                        mla(1, 2, b).build()),
                arguments("mla TP2 attention DP -> TP1, block -> block", mla,
                        mla(2, 1, b).attentionDp(true, 0, 2).build(), mla(1, 1, b).build()));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("pulls")
    void required_1_pullBetweenDevicePoolsVerifiesAndNoDeviceBufferReachesTheTransport(
            String name, FormatterProvider provider, CacheState ctx, CacheState gen) throws Exception {
        DevicePoolTransfer.Outcome o = DevicePoolTransfer.run(memory, provider, ctx, gen, D, D, 100, false, false);
        assertThat(o.verify().ok()).as(o.verify().toString()).isTrue();
        assertThat(o.verify().checkedElements()).isEqualTo(o.expectedChecks()).isPositive();
        assertThat(o.deviceBuffers()).as("DEVICE buffers handed to a transport without DEVICE_MEMORY").isZero();
        assertThat(o.messages()).isPositive();
    }

    static Stream<Arguments> pushes() {
        FormatterProvider std = new StandardFormatterProvider();
        FormatterProvider mla = new MlaFormatterProvider();
        return Stream.of(
                arguments("std TP1 -> TP1, block -> block (direct plan)", std,
                        standard(1, 1, 1, PoolLayout.BLOCK).build(), standard(1, 1, 1, PoolLayout.BLOCK).build()),
                arguments("std TP2 -> TP1, layer-hnd -> layer-nhd", std,
                        standard(2, 1, 1, PoolLayout.LAYER_HND).build(),
                        standard(1, 1, 1, PoolLayout.LAYER_NHD).build()),
                arguments("mla TP1 -> gen CP2, layer-nhd -> layer-nhd", mla,
                        mla(1, 1, PoolLayout.LAYER_NHD).build(), mla(1, 2, PoolLayout.LAYER_NHD).build()));
    }

    /**
     * Push from a device pool: every entry's source is staging, never the device pool (the generation pool is host
     * memory: emulated one-sided writes register host memory only, see the README).
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("pushes")
    void required_2_pushFromADevicePoolIsStagedAndVerifies(String name, FormatterProvider provider, CacheState ctx,
                                                           CacheState gen) throws Exception {
        DevicePoolTransfer.Outcome o = DevicePoolTransfer.run(memory, provider, ctx, gen, D, H, 100, true, false);
        assertThat(o.verify().ok()).as(o.verify().toString()).isTrue();
        assertThat(o.verify().checkedElements()).isEqualTo(o.expectedChecks()).isPositive();
        assertThat(o.deviceBuffers()).as("write entries with a DEVICE source").isZero();
        assertThat(o.messages()).isPositive();
    }

    @Test
    void required_3_oneSideOnTheDeviceTheOtherOnTheHost() throws Exception {
        FormatterProvider std = new StandardFormatterProvider();
        CacheState ctx = standard(2, 1, 1, PoolLayout.LAYER_NHD).build();
        CacheState gen = standard(1, 1, 1, PoolLayout.BLOCK).build();
        for (MemoryKind[] kinds : new MemoryKind[][] {{D, H}, {H, D}}) {
            DevicePoolTransfer.Outcome o = DevicePoolTransfer.run(memory, std, ctx, gen, kinds[0], kinds[1], 100,
                    false, false);
            assertThat(o.verify().ok()).as(kinds[0] + " -> " + kinds[1] + ": " + o.verify()).isTrue();
            assertThat(o.verify().checkedElements()).isEqualTo(o.expectedChecks());
            assertThat(o.deviceBuffers()).isZero();
        }
    }

    /**
     * A transport that declares DEVICE_MEMORY gets the device pools' own memory where the plan is direct (zero
     * copy on the device), and the bytes still verify.
     */
    @Test
    void required_4_aDeviceCapableTransportGetsThePoolsOwnMemory() throws Exception {
        FormatterProvider std = new StandardFormatterProvider();
        CacheState same = standard(1, 1, 1, PoolLayout.LAYER_HND).build();
        DevicePoolTransfer.Outcome o = DevicePoolTransfer.run(memory, std, same, same, D, D, 100, false, true);
        assertThat(o.verify().ok()).as(o.verify().toString()).isTrue();
        assertThat(o.deviceBuffers()).as("device buffers handed to a DEVICE_MEMORY transport").isEqualTo(o.messages());
        DevicePoolTransfer.Outcome mla = DevicePoolTransfer.run(memory, new MlaFormatterProvider(),
                mla(1, 1, PoolLayout.BLOCK).build(), mla(1, 1, PoolLayout.BLOCK).build(), D, D, 400, false, true);
        assertThat(mla.verify().ok()).as(mla.verify().toString()).isTrue();
        assertThat(mla.deviceBuffers()).isPositive();
    }
}
