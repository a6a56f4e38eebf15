package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.testkit.MemoryProviderConformanceTest;

/**
 * Core's host memory provider passes the memory-provider suite. It lives in the testkit's tests because core's own
 * tests cannot depend on the testkit (which depends on core).
 */
class HostMemoryProviderConformanceTest extends MemoryProviderConformanceTest {
    @Override
    protected MemoryProvider provider() {
        return new HostMemoryProvider();
    }
}
