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
 * Aeron's own receive-side loss generator ({@link DebugReceiveChannelEndpoint} with the generator that
 * {@link DebugChannelEndpointConfiguration#lossGeneratorSupplier(double, long)} makes: a
 * {@link io.aeron.driver.ext.RandomLossGenerator}, or none at rate 0 — what
 * {@code io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier} builds from
 * {@code aeron.debug.receive.data.loss.rate} / {@code .seed}), with two additions: the generator's decisions are
 * counted (frames seen, frames dropped: Aeron keeps no counter of its own for them, and a rate-limited link drops
 * frames too, so without this count the NAKs of a lossy run could not be told from the link's), and the rate can be
 * changed while the driver runs ({@link #setRate}: a fresh generator of Aeron's for the new rate), so one process
 * pair runs without and with loss.
 * Selected in a child JVM by
 * {@code -Daeron.ReceiveChannelEndpoint.supplier=dev.kvtransfer.crosshost.CountingLossReceiveChannelEndpointSupplier}.
 */
public final class CountingLossReceiveChannelEndpointSupplier implements ReceiveChannelEndpointSupplier {
    private static final AtomicLong SEEN = new AtomicLong();
    private static final AtomicLong DROPPED = new AtomicLong();
    private static volatile LossGenerator current =
            DebugChannelEndpointConfiguration.receiveDataLossGeneratorSupplier();

    /**
     * Makes every endpoint of this process drop received data frames at a new rate from now on.
     *
     * @param rate fraction of frames to drop, 0 for none
     * @param seed the generator's seed
     */
    static void setRate(double rate, long seed) {
        current = DebugChannelEndpointConfiguration.lossGeneratorSupplier(rate, seed);
    }

    /** Made by the media driver (by class name). */
    public CountingLossReceiveChannelEndpointSupplier() {
    }

    @Override
    public ReceiveChannelEndpoint newInstance(UdpChannel udpChannel, DataPacketDispatcher dispatcher,
                                              AtomicCounter statusIndicator, MediaDriver.Context context) {
        return new DebugReceiveChannelEndpoint(udpChannel, dispatcher, statusIndicator, context, new Counting(),
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

    /** Delegates every decision to Aeron's generator of the current rate and counts it. */
    private static final class Counting implements LossGenerator {
        @Override
        public boolean shouldDropFrame(InetSocketAddress address, UnsafeBuffer buffer, int length) {
            return count(current.shouldDropFrame(address, buffer, length));
        }

        @Override
        public boolean shouldDropFrame(InetSocketAddress address, UnsafeBuffer buffer, int streamId, int sessionId,
                                       int termId, int termOffset, int length) {
            return count(current.shouldDropFrame(address, buffer, streamId, sessionId, termId, termOffset, length));
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
