package dev.kvtransfer.core.transfer;

import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Leases out are counted so that a closing transceiver can wait for those a posted receive still holds: the
 * transport gives them back on its own thread once it closed, and the buffer manager must not count what is
 * outstanding while one is being freed (rule 3.10 failed on that race: a buffer listed as outstanding and closed).
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ControlBuffersTest {
    @Test
    void awaitReturnedWaitsForALeaseClosedOnAnotherThreadAndItsBufferIsFreedFirst() throws Exception {
        HostBufferManager mm = new HostBufferManager();
        ControlBuffers control = new ControlBuffers(mm);
        ControlBuffers.Lease pooled = control.acquire(100);
        ControlBuffers.Lease large = control.acquire(ControlBuffers.SLOT_BYTES + 1);
        control.close(); // as a closing transceiver does: later closed leases are freed at once
        assertThat(control.awaitReturned(Duration.ofMillis(20))).as("two leases still out").isFalse();
        pooled.close();
        CountDownLatch started = new CountDownLatch(1);
        CompletableFuture<Void> transportThread = CompletableFuture.runAsync(() -> {
            started.countDown();
            large.close(); // a posted receive's lease, given back once the transport closed
        });
        started.await();
        assertThat(control.awaitReturned(Duration.ofSeconds(10))).isTrue();
        transportThread.get(10, TimeUnit.SECONDS);
        mm.close(); // throws naming the buffers if one were still outstanding
    }

    @Test
    void aLeaseTakenFromTheFreeListAndClosedTwiceIsCountedOnce() {
        HostBufferManager mm = new HostBufferManager();
        ControlBuffers control = new ControlBuffers(mm);
        ControlBuffers.Lease first = control.acquire(64);
        first.reusable();
        first.close();
        assertThat(control.freeCount()).isEqualTo(1);
        ControlBuffers.Lease again = control.acquire(64);
        again.close();
        again.close();
        assertThat(control.awaitReturned(Duration.ZERO)).isTrue();
        control.close();
        mm.close();
    }
}
