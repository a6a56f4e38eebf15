package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The in-JVM transport {@value #NAME}: ranks that are threads of one JVM exchange messages through a shared
 * <em>fabric</em> (managers created with the same {@value #FABRIC_PROPERTY} property, default
 * {@value #DEFAULT_FABRIC}, reach each other at addresses {@code loopback://<fabric>/<n>}).
 *
 * <p>Bytes really move: a send copies off-heap to off-heap, once, straight into the receiver's buffer when a
 * matching receive is already posted. Otherwise a send of at most {@link Connection#EAGER_LIMIT} bytes is copied
 * into a queued off-heap message (from a small pool) that the receive copies out, and returns at once, so the
 * protocol's id/info/ready messages may be sent before the peer receives; a larger send is a <em>rendezvous</em>: it
 * waits up to {@value #RENDEZVOUS_WAIT_US_PROPERTY} microseconds (default {@value #DEFAULT_RENDEZVOUS_WAIT_US},
 * never past its own deadline; 0 makes every send eager) for the receive, which then copies straight from the
 * sender's buffer, and after that wait goes eager (never a deadlock, never a timeout). Every copy runs on the calling
 * thread; the one thread a manager starts, on its first posted receive ({@code recvAsync}), runs their callbacks
 * and deadlines. Closing a manager fails its blocked calls with
 * {@link dev.kvtransfer.api.transport.TransportClosedException} and its peers' receives waiting on it with
 * {@code PEER_LOST} (so it declares {@link TransportCapability#PEER_FAILURE_DETECTION}). It cannot cross
 * processes and does not take device memory. One-sided writes ({@link TransportCapability#ONE_SIDED_WRITE}) are
 * emulated with transport-support's {@link dev.kvtransfer.transport.support.EmulatedOneSided}.
 */
public final class LoopbackTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "loopback";
    /** Transport property naming the fabric a manager joins. */
    public static final String FABRIC_PROPERTY = "loopback.fabric";
    /** The fabric used when the property is absent. */
    public static final String DEFAULT_FABRIC = "default";
    /**
     * Transport property: how long, in microseconds, a send larger than {@link Connection#EAGER_LIMIT} waits for its
     * receive before it copies the message into an eager buffer (0: never wait).
     */
    public static final String RENDEZVOUS_WAIT_US_PROPERTY = "loopback.rendezvousWaitMicros";
    /** The rendezvous wait when the property is absent: 20 ms. */
    public static final long DEFAULT_RENDEZVOUS_WAIT_US = 20_000;
    /** Transport property: the most bytes of eager buffers a manager keeps for reuse (0: none). */
    public static final String EAGER_POOL_BYTES_PROPERTY = "loopback.eagerPoolBytes";
    /** The eager pool's bound when the property is absent: 64 MiB. */
    public static final long DEFAULT_EAGER_POOL_BYTES = 64L << 20;

    /** A provider (stateless: fabrics are JVM-wide). */
    public LoopbackTransportProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean isAvailable() {
        return true;
    }

    @Override
    public String unavailabilityCause() {
        return null;
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return EnumSet.of(TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.ONE_SIDED_WRITE);
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        config.checkKnownProperties("loopback.", Set.of(FABRIC_PROPERTY, RENDEZVOUS_WAIT_US_PROPERTY,
                EAGER_POOL_BYTES_PROPERTY));
        for (String key : List.of(RENDEZVOUS_WAIT_US_PROPERTY, EAGER_POOL_BYTES_PROPERTY)) {
            if (config.longProperty(key, 0) < 0) {
                throw new IllegalArgumentException("transport property " + key + " = '" + config.property(key, "")
                        + "': must be >= 0");
            }
        }
        String fabric = config.property(FABRIC_PROPERTY, DEFAULT_FABRIC);
        if (fabric.isBlank() || fabric.contains("/")) {
            throw new IllegalArgumentException("transport property " + FABRIC_PROPERTY + " = '" + fabric
                    + "': must be non-blank and contain no '/'");
        }
        return LoopbackConnectionManager.open(fabric, config);
    }

    @Override
    public String toString() {
        return "LoopbackTransportProvider";
    }
}
