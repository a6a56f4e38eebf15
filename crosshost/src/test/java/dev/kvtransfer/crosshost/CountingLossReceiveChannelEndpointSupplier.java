package dev.kvtransfer.crosshost;

import io.aeron.driver.DataPacketDispatcher;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ReceiveChannelEndpointSupplier;
import io.aeron.driver.ext.DebugChannelEndpointConfiguration;
import io.aeron.driver.ext.DebugReceiveChannelEndpoint;
import io.aeron.driver.ext.LossGenerator;
import io.aeron.driver.media.ReceiveChannelEndpoint;
import io.aeron.driver.media.UdpChannel;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Aeron's own receive-side loss generator ({@link DebugReceiveChannelEndpoint} with the
 * {@link io.aeron.driver.ext.RandomLossGenerator} that {@code aeron.debug.receive.data.loss.rate} / {@code .seed}
 * configure, exactly what {@code io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier} builds), with the
 * generator's decisions counted: how many data frames it saw and how many it dropped. Aeron keeps no counter of
 * its own for these, and a rate-limited link drops frames too (the token bucket's queue overflows), so without this
 * count the NAKs of a lossy run could not be told apart from the link's. Selected in a child JVM by
 * {@code -Daeron.ReceiveChannelEndpoint.supplier=dev.kvtransfer.crosshost.CountingLossReceiveChannelEndpointSupplier}.
 */
public final class CountingLossReceiveChannelEndpointSupplier implements ReceiveChannelEndpointSupplier {
    private static final AtomicLong SEEN = new AtomicLong();
    private static final AtomicLong DROPPED = new AtomicLong();

    /** Made by the media driver (by class name). */
    public CountingLossReceiveChannelEndpointSupplier() {
    }

    @Override
    public ReceiveChannelEndpoint newInstance(UdpChannel udpChannel, DataPacketDispatcher dispatcher,
                                              AtomicCounter statusIndicator, MediaDriver.Context context) {
        return new DebugReceiveChannelEndpoint(udpChannel, dispatcher, statusIndicator, context,
                new Counting(DebugChannelEndpointConfiguration.receiveDataLossGeneratorSupplier()),
                DebugChannelEndpointConfiguration.receiveControlLossGeneratorSupplier());
    }

    /**
     * Prints {@code COUNTER loss generator frames seen=<n>} and {@code COUNTER loss generator frames dropped=<n>}
     * (this process's drivers, since start).
     *
     * @param out where to print
     */
    static void print(PrintStream out) {
        out.println("COUNTER loss generator frames seen=" + SEEN.get());
        out.println("COUNTER loss generator frames dropped=" + DROPPED.get());
    }

    /** Delegates every decision to Aeron's generator and counts it. */
    private static final class Counting implements LossGenerator {
        private final LossGenerator delegate;

        Counting(LossGenerator delegate) {
            this.delegate = delegate;
        }

        @Override
        public boolean shouldDropFrame(InetSocketAddress address, UnsafeBuffer buffer, int length) {
            return count(delegate.shouldDropFrame(address, buffer, length));
        }

        @Override
        public boolean shouldDropFrame(InetSocketAddress address, UnsafeBuffer buffer, int streamId, int sessionId,
                                       int termId, int termOffset, int length) {
            return count(delegate.shouldDropFrame(address, buffer, streamId, sessionId, termId, termOffset, length));
        }

        private static boolean count(boolean drop) {
            SEEN.incrementAndGet();
            if (drop) {
                DROPPED.incrementAndGet();
            }
            return drop;
        }
    }
}
