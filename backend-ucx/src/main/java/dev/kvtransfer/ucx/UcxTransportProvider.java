package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.Objects;
import java.util.Set;
import java.util.function.Supplier;

/**
 * The UCX transport ({@code "ucx"}): tagged messages through jucx 1.12.1 over the machine's {@code libucp}.
 *
 * <p>Loading this class touches no native code; the first {@link #isAvailable()} / {@link #capabilities()} /
 * {@link #create} probes {@code libucp} once per JVM (loads jucx's JNI library, opens and closes a UCP context)
 * and caches the answer, so a machine without {@code libucx0} still discovers this plugin and reports why it
 * cannot run.
 *
 * <p>{@link TransportCapability#DEVICE_MEMORY} is declared only where the probed UCX reports CUDA memory
 * support; Debian's {@code libucx0} is built without it. {@link TransportCapability#NATIVE_ONE_SIDED_WRITE} is
 * not declared: a manager of the default configuration ({@code ucx.oneSided=auto}) emulates one-sided writes over
 * tagged messages on every host (a revoked region must stay quiet; {@link UcxSettings#ONE_SIDED}).
 * Each manager's {@link ConnectionManager#capabilities()} says what it does with its own settings
 * ({@code ucx.oneSided=native} forces UCX RMA and declares it).
 */
public final class UcxTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "ucx";

    private static volatile ProbeResult sharedProbe;

    private final Supplier<ProbeResult> probe;
    private volatile ProbeResult probed;

    /** Creates the provider (no native code runs until it is asked something). */
    public UcxTransportProvider() {
        this(UcxTransportProvider::sharedProbe);
    }

    /**
     * For tests: a provider with a given probe.
     *
     * @param probe answers whether UCX loads here
     */
    UcxTransportProvider(Supplier<ProbeResult> probe) {
        this.probe = Objects.requireNonNull(probe, "probe");
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean isAvailable() {
        return probe().available();
    }

    @Override
    public String unavailabilityCause() {
        ProbeResult r = probe();
        return r.available() ? null : r.cause();
    }

    @Override
    public Set<TransportCapability> capabilities() {
        EnumSet<TransportCapability> caps = EnumSet.of(TransportCapability.CROSS_PROCESS,
                TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.AUTHENTICATED);
        if (probe().cudaMemory()) {
            caps.add(TransportCapability.DEVICE_MEMORY);
        }
        return caps;
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        ProbeResult r = probe();
        if (!r.available()) {
            throw new TransportException(ErrorCode.NETWORK, "UCX transport unavailable: " + r.cause());
        }
        return new UcxConnectionManager(config);
    }

    private ProbeResult probe() {
        ProbeResult r = probed;
        if (r == null) {
            try {
                r = probe.get();
            } catch (RuntimeException | LinkageError e) {
                r = ProbeResult.unavailable("probing UCX failed: " + e);
            }
            probed = r;
        }
        return r;
    }

    private static ProbeResult sharedProbe() {
        ProbeResult r = sharedProbe;
        if (r == null) {
            synchronized (UcxTransportProvider.class) {
                r = sharedProbe;
                if (r == null) {
                    r = runNativeProbe();
                    sharedProbe = r;
                }
            }
        }
        return r;
    }

    private static ProbeResult runNativeProbe() {
        return probeWith(() -> UcxProbe.probe()); // a lambda body, so a missing jucx fails inside the try
    }

    /**
     * Runs a probe and turns linkage failures into a cause; never throws.
     *
     * @param nativeProbe the probe (the real one loads jucx and opens a UCP context)
     * @return the result
     */
    static ProbeResult probeWith(Supplier<ProbeResult> nativeProbe) {
        try {
            return nativeProbe.get();
        } catch (UnsatisfiedLinkError e) {
            return ProbeResult.unavailable("libucp could not be loaded (" + e.getMessage()
                    + "); install UCX 1.12 or newer, e.g. 'apt-get install libucx0'");
        } catch (ExceptionInInitializerError | NoClassDefFoundError e) {
            return ProbeResult.unavailable("jucx or libucp could not be initialised (" + e
                    + (e.getCause() != null ? ", caused by " + e.getCause() : "")
                    + "); install UCX 1.12 or newer, e.g. 'apt-get install libucx0', and keep jucx 1.12.1 on the"
                    + " class path");
        } catch (RuntimeException | LinkageError e) {
            return ProbeResult.unavailable("UCX context could not be created: " + e);
        }
    }

    /**
     * What the probe found.
     *
     * @param available  whether a UCP context opens here
     * @param cause      why not, or {@code null}
     * @param cudaMemory whether UCX reports CUDA memory support
     */
    record ProbeResult(boolean available, String cause, boolean cudaMemory) {
        static ProbeResult unavailable(String cause) {
            return new ProbeResult(false, cause, false);
        }
    }
}
