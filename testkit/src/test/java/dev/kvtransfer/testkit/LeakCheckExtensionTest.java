package dev.kvtransfer.testkit;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Events;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;

/** The leak extension fails the class that leaked and passes one that cleaned up. */
class LeakCheckExtensionTest {
    /** Holds what the leaky class leaked, so this test can clean up after proving the failure. */
    static final List<AutoCloseable> LEAKED = new ArrayList<>();
    static final HostBufferManager MEMORY = new HostBufferManager();

    /** Leaks one host buffer and one thread. */
    @ExtendWith(LeakCheckExtension.class)
    static class Leaky {
        @Test
        void leaks() {
            MemoryBuffer b = MEMORY.allocate(4096, MemoryKind.HOST);
            LEAKED.add(b);
            Thread t = new Thread(() -> {
                try {
                    Thread.sleep(60_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "leaked-by-test");
            t.setDaemon(true);
            t.start();
            LEAKED.add(t::interrupt);
        }
    }

    /** Closes what it opens. */
    @ExtendWith(LeakCheckExtension.class)
    static class Tidy {
        @Test
        void closesEverything() {
            MEMORY.allocate(4096, MemoryKind.HOST).close();
        }
    }

    @Test
    void aClassThatLeakedFailsNamingTheLeak() throws Exception {
        System.setProperty(LeakCheckExtension.BOUND_PROPERTY, "300");
        Events events = EngineTestKit.engine("junit-jupiter").selectors(selectClass(Leaky.class)).execute()
                .containerEvents();
        try {
            assertThat(events.failed().count()).as("the leaky class fails").isEqualTo(1);
            Throwable t = events.failed().stream().findFirst().orElseThrow().getPayload(
                    org.junit.platform.engine.TestExecutionResult.class).orElseThrow().getThrowable().orElseThrow();
            assertThat(t.getMessage()).contains("Leaky leaked", "1 host buffers not closed", "threads");
        } finally {
            System.clearProperty(LeakCheckExtension.BOUND_PROPERTY);
            for (AutoCloseable c : LEAKED) {
                c.close();
            }
        }
    }

    @Test
    void aTidyClassPasses() {
        Events events = EngineTestKit.engine("junit-jupiter").selectors(selectClass(Tidy.class)).execute()
                .containerEvents();
        assertThat(events.failed().count()).isZero();
    }

    @AfterAll
    static void closeMemory() {
        MEMORY.close();
    }
}
