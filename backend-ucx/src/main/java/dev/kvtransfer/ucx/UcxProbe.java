package dev.kvtransfer.ucx;

import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucs.UcsConstants;

/**
 * The only place the provider touches jucx before a manager exists; kept in its own class so that a missing
 * jucx jar or {@code libucp} surfaces as a catchable {@link LinkageError} when this class is first used.
 */
final class UcxProbe {
    private UcxProbe() {
    }

    /**
     * Loads jucx's JNI library (which links {@code libucp}) and opens a tag-matching context.
     *
     * @return the result; throws {@link LinkageError}s for the caller to turn into a cause
     */
    static UcxTransportProvider.ProbeResult probe() {
        try (UcpContext ctx = new UcpContext(new UcpParams().requestTagFeature().requestWakeupFeature())) {
            boolean cuda = UcsConstants.MEMORY_TYPE.isMemTypeSupported(ctx.getMemoryTypesMask(),
                    UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA);
            return new UcxTransportProvider.ProbeResult(true, null, cuda);
        }
    }
}
