package dev.kvtransfer.testkit;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/**
 * The conformance suite of a memory plugin (SPEC.md §6). A provider's test is a short subclass:
 *
 * <pre>{@code
 * class HostMemoryProviderConformanceTest extends MemoryProviderConformanceTest {
 *     protected MemoryProvider provider() { return new HostMemoryProvider(); }
 * }
 * }</pre>
 *
 * <p>The buffer managers come from {@link #createManager()} ({@code provider().create(Map.of())} unless overridden,
 * e.g. to run a device provider on a fake runtime where no device exists). Contents of device memory are checked
 * through copies to and from host memory of the same manager. Every manager a rule opens is closed after it, and a
 * buffer left outstanding fails that close.
 */
@RuleBound(seconds = 120, suiteSeconds = 420)
@ExtendWith(LeakCheckExtension.class)
public abstract class MemoryProviderConformanceTest {
    /** Alignment every allocation must have at least (cache lines; DMA engines want more, hosts give pages). */
    protected static final long MIN_ALIGNMENT = 64;

    private final List<BufferManager> managers = new ArrayList<>();
    private final List<ConnectionManager> transports = new ArrayList<>();

    /** @return the provider under test */
    protected abstract MemoryProvider provider();

    /**
     * A manager of the provider's memory, closed after the rule.
     *
     * @return a new manager (default: {@code provider().create(Map.of())})
     */
    protected BufferManager createManager() {
        return provider().create(Map.of());
    }

    /** @return the kinds the managers allocate (default: the provider's {@code kinds()}) */
    protected Set<MemoryKind> kinds() {
        return provider().kinds();
    }

    @BeforeEach
    void resetConformance() {
        managers.clear();
        transports.clear();
    }

    @AfterEach
    void closeConformance() {
        for (ConnectionManager t : transports) {
            t.close();
        }
        for (BufferManager m : managers) {
            m.close();
        }
    }

    /** @return a manager closed after the rule */
    protected final BufferManager newManager() {
        BufferManager m = createManager();
        managers.add(m);
        return m;
    }

    private static boolean host(MemoryKind k) {
        return k != MemoryKind.DEVICE;
    }

    /** Writes the pattern of {@code seed} into a host-addressable range. */
    private static void fill(MemoryBuffer b, long offset, int length, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        for (int i = 0; i < length; i++) {
            bb.put((int) offset + i, (byte) KvPattern.mix(seed + i));
        }
    }

    private static void verify(MemoryBuffer b, long offset, int length, long seed, String what) {
        ByteBuffer bb = b.asByteBuffer();
        for (int i = 0; i < length; i++) {
            byte want = (byte) KvPattern.mix(seed + i);
            byte got = bb.get((int) offset + i);
            if (got != want) {
                fail(what + ": byte " + i + " of " + length + " expected " + want + ", found " + got);
            }
        }
    }

    @Test
    public void required_spec6_01_providerIsFoundThroughServiceLoaderAndAvailabilityNeverThrows() {
        MemoryProvider p = provider();
        List<MemoryProvider> found = ServiceLoader.load(MemoryProvider.class).stream()
                .map(ServiceLoader.Provider::get).toList();
        assertThat(found).as("memory providers registered in META-INF/services").anySatisfy(f -> {
            assertThat(f.name()).isEqualTo(p.name());
            assertThat(f.getClass()).isEqualTo(p.getClass());
        });
        boolean available = p.isAvailable();
        String cause = p.unavailabilityCause();
        assertThat(p.isAvailable()).as("isAvailable() is stable").isEqualTo(available);
        if (available) {
            assertThat(cause).as("no cause when available").isNull();
        } else {
            assertThat(cause).as("the cause when unavailable").isNotBlank();
            assertThatThrownBy(() -> p.create(Map.of())).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining(cause);
        }
        assertThat(p.kinds()).as("declared kinds").isNotEmpty();
    }

    @Test
    public void required_spec6_02_everyDeclaredKindIsAllocatedAndUndeclaredKindsAreRefused() {
        BufferManager m = newManager();
        for (MemoryKind k : MemoryKind.values()) {
            if (kinds().contains(k)) {
                for (long size : new long[] {0, 1, 4097, (1L << 20) + 3}) {
                    try (MemoryBuffer b = m.allocate(size, k)) {
                        assertThat(b.size()).as("size of a %s allocation", k).isEqualTo(size);
                        assertThat(b.kind()).isEqualTo(k);
                    }
                }
            } else {
                assertThatThrownBy(() -> m.allocate(64, k)).as("allocating undeclared %s", k)
                        .isInstanceOfAny(UnsupportedOperationException.class, IllegalArgumentException.class)
                        .hasMessageContaining(k.name());
            }
        }
        assertThatThrownBy(() -> m.allocate(-1, kinds().iterator().next()))
                .isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    public void required_spec6_03_allocationsAreAlignedForDirectIo() {
        BufferManager m = newManager();
        for (MemoryKind k : kinds()) {
            for (long size : new long[] {1, 7, 4096, 65_537}) {
                List<MemoryBuffer> held = new ArrayList<>();
                try {
                    for (int i = 0; i < 4; i++) {
                        MemoryBuffer b = m.allocate(size, k);
                        held.add(b);
                        long align = k == MemoryKind.HOST ? 4096 : MIN_ALIGNMENT;
                        assertThat(b.address() % align).as("address of %s allocation %d of %d bytes mod %d", k, i,
                                size, align).isZero();
                    }
                } finally {
                    held.forEach(MemoryBuffer::close);
                }
            }
        }
    }

    @Test
    public void required_spec6_04_hostMemoryIsAddressableLittleEndianAndSharedWithSlices() {
        BufferManager m = newManager();
        for (MemoryKind k : kinds()) {
            try (MemoryBuffer b = m.allocate(8192, k)) {
                if (!host(k)) {
                    assertThatThrownBy(b::asByteBuffer).isInstanceOf(UnsupportedOperationException.class);
                    continue;
                }
                ByteBuffer bb = b.asByteBuffer();
                assertThat(bb.capacity()).isEqualTo(8192);
                assertThat(bb.order()).as("byte order of %s memory", k).isEqualTo(ByteOrder.LITTLE_ENDIAN);
                MemoryBuffer s = b.slice(100, 50);
                assertThat(s.address()).isEqualTo(b.address() + 100);
                assertThat(s.size()).isEqualTo(50);
                assertThat(s.kind()).isEqualTo(k);
                s.asByteBuffer().putLong(0, 0x1122334455667788L);
                assertThat(bb.getLong(100)).as("a slice writes its parent's memory").isEqualTo(0x1122334455667788L);
                assertThat(bb.get(100)).as("little-endian").isEqualTo((byte) 0x88);
                assertThatThrownBy(() -> b.slice(8000, 200)).isInstanceOf(IndexOutOfBoundsException.class);
            }
        }
    }

    @Test
    public void required_spec6_05_copiesBetweenEveryPairOfKindsAreExact() {
        BufferManager m = newManager();
        MemoryKind hostKind = kinds().contains(MemoryKind.HOST) ? MemoryKind.HOST : MemoryKind.PINNED_HOST;
        int n = (1 << 20) + 13;
        try (MemoryBuffer in = m.allocate(n + 64, hostKind); MemoryBuffer out = m.allocate(n + 64, hostKind)) {
            for (MemoryKind a : kinds()) {
                for (MemoryKind b : kinds()) {
                    long seed = a.ordinal() * 31L + b.ordinal();
                    try (MemoryBuffer src = m.allocate(n + 64, a); MemoryBuffer dst = m.allocate(n + 64, b)) {
                        fill(in, 5, n, seed);
                        // host -> a (at 3), a -> b (at 11), b -> host (at 7): every hop at an odd offset. The api
                        // promises a copy's bytes only after synchronize() (a HOST -> HOST memcpy may overtake an
                        // earlier PINNED_HOST copy still on the stream), so each hop is synchronized.
                        m.copy(in, 5, src, 3, n);
                        m.synchronize();
                        m.copy(src, 3, dst, 11, n);
                        m.synchronize();
                        m.copy(dst, 11, out, 7, n);
                        m.synchronize();
                        verify(out, 7, n, seed, a + " -> " + b + " copy of " + n + " bytes");
                        assertThatThrownBy(() -> m.copy(src, 60, dst, 0, n + 5)).as("%s -> %s past the source", a, b)
                                .isInstanceOf(IndexOutOfBoundsException.class);
                        assertThatThrownBy(() -> m.copy(src, 0, dst, 60, n + 5)).as("%s -> %s past the target", a, b)
                                .isInstanceOf(IndexOutOfBoundsException.class);
                    }
                }
            }
        }
    }

    @Test
    public void required_spec6_06_closeRefusesWhileBuffersAreOutstandingAndNamesThem() {
        BufferManager m = createManager();
        MemoryKind k = kinds().iterator().next();
        MemoryBuffer left = m.allocate(12_345, k);
        try {
            assertThatThrownBy(m::close).as("closing with a buffer outstanding")
                    .isInstanceOf(IllegalStateException.class).hasMessageContaining("12345");
        } finally {
            left.close();
        }
        m.close();
        m.close(); // idempotent
        assertThatThrownBy(() -> m.allocate(8, k)).as("allocating after close")
                .isInstanceOf(IllegalStateException.class);
    }

    @Test
    public void required_spec6_07_hostBuffersRegisterWithATransportAndMoveExactly() {
        BufferManager m = newManager();
        LoopbackTransportProvider loopback = new LoopbackTransportProvider();
        TransportConfig cfg = TransportConfig.builder().name("memory-conformance").defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "memory-" + System.nanoTime()).build();
        ConnectionManager a = loopback.create(cfg);
        transports.add(a);
        ConnectionManager b = loopback.create(cfg);
        transports.add(b);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        Set<MemoryKind> hostKinds = EnumSet.noneOf(MemoryKind.class);
        kinds().stream().filter(MemoryProviderConformanceTest::host).forEach(hostKinds::add);
        assertThat(hostKinds).as("a memory plugin must allocate some host memory (control buffers)").isNotEmpty();
        int n = 64 * 1024 + 9;
        for (MemoryKind k : hostKinds) {
            try (MemoryBuffer src = m.allocate(n, k); MemoryBuffer dst = m.allocate(n, k)) {
                fill(src, 0, n, 600 + k.ordinal());
                ab.send(9100, src, 0, n);
                ba.recv(9100, dst, 0, n);
                verify(dst, 0, n, 600 + k.ordinal(), "a " + k + " buffer sent over loopback");
                try (MemoryBuffer target = m.allocate(n, k); RegisteredRegion r = b.register(target)) {
                    ab.write(new WriteBatch().add(src, 0, r.descriptor(), 0, n), Duration.ofSeconds(30));
                    verify(target, 0, n, 600 + k.ordinal(), "a one-sided write into a registered " + k + " buffer");
                }
            }
        }
    }

    @Test
    public void required_spec6_08_unknownPropertiesOfTheProvidersOwnPrefixAreRefused() {
        MemoryProvider p = provider();
        String key = p.name() + ".noSuchSetting";
        if (!p.isAvailable()) {
            // Unavailable: create refuses with the cause, whatever the properties.
            assertThatThrownBy(() -> p.create(Map.of(key, "1")))
                    .isInstanceOfAny(IllegalStateException.class, IllegalArgumentException.class);
            return;
        }
        assertThatThrownBy(() -> p.create(Map.of(key, "1"))).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining(key).hasMessageContaining("known");
        // Other plugins' properties are left alone: one map may configure them all.
        p.create(Map.of("someotherprovider.setting", "x")).close();
    }
}
