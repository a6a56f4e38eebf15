package dev.kvtransfer.cli;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;

/**
 * The router &lt;-&gt; instance API of {@code kvtransfer serve} / {@code kvtransfer route}, version 1: HTTP/JSON on
 * the instance's control endpoint, every call but health and readiness signed with the deployment secret
 * ({@code X-Kvtransfer-Auth}, see {@link dev.kvtransfer.registry.RegistryAuth}). Documented in the cli README;
 * fields are only ever added (readers ignore unknown ones).
 *
 * <pre>
 * GET  /v1/health            unsigned  200 {"status": "serving"|"draining", "id", "role"}
 * GET  /v1/ready             unsigned  200 when registered and taking requests, else 503
 * POST /v1/context           ContextRequest    -> ContextReply      (context instances)
 * GET  /v1/context/{id}                        -> ContextOutcome    (context instances)
 * POST /v1/generation        GenerationRequest -> GenerationReply   (generation instances)
 * </pre>
 */
final class ControlApi {
    /** API version (the path prefix). */
    static final String VERSION = "v1";

    private ControlApi() {
    }

    /**
     * Start a request's prefill and hand its KV over.
     *
     * @param requestId the request id (unique in the deployment while in flight)
     * @param isl       prompt length in tokens
     * @param layerwise hand each layer over when its prefill ends
     */
    @JsonIgnoreProperties(ignoreUnknown = true)
    record ContextRequest(long requestId, int isl, boolean layerwise) {
    }

    /**
     * The context-phase parameters of an accepted request.
     *
     * @param requestId    the request id
     * @param params       base64 of {@code ContextPhaseParams.toBytes()}: what the generation instance needs
     * @param prefillNanos the simulated prefill's length
     * @param instance     the context instance's id
     */
    @JsonIgnoreProperties(ignoreUnknown = true)
    record ContextReply(long requestId, String params, long prefillNanos, String instance) {
    }

    /**
     * What became of a context request.
     *
     * @param requestId           the request id
     * @param state               the request state on the context ranks (the worst of them), or {@code UNKNOWN}
     * @param prefillEndEpochNanos wall-clock end of its prefill (0 while running)
     * @param code                error code when it failed, else empty
     * @param error               one line when it failed, else empty
     */
    @JsonIgnoreProperties(ignoreUnknown = true)
    record ContextOutcome(long requestId, String state, long prefillEndEpochNanos, String code, String error) {
    }

    /**
     * Receive a request's KV (pull, or have it pushed, as the instance is configured) and verify every element.
     *
     * @param requestId the request id
     * @param isl       prompt length in tokens
     * @param params    base64 of the context-phase parameters
     */
    @JsonIgnoreProperties(ignoreUnknown = true)
    record GenerationRequest(long requestId, int isl, String params) {
    }

    /**
     * The outcome of a request on the generation instance.
     *
     * @param requestId           the request id
     * @param ok                  completed on every serving rank and every element matched
     * @param bytes               bytes received
     * @param checked             elements verified
     * @param mismatches          elements that differed from KvPattern
     * @param transferNanos       from the receive request to the last rank's completion
     * @param readyEpochNanos     wall-clock time the KV was ready
     * @param code                error code when it failed ({@code PEER_LOST}, {@code TIMEOUT}, ..., {@code MISMATCH})
     * @param error               one line when it failed
     * @param instance            the generation instance's id
     */
    @JsonIgnoreProperties(ignoreUnknown = true)
    record GenerationReply(long requestId, boolean ok, long bytes, long checked, long mismatches, long transferNanos,
                           long readyEpochNanos, String code, String error, String instance) {
    }

    /** @return wall-clock now in epoch nanoseconds (microsecond resolution) */
    static long epochNanos() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    /**
     * @param monotonicNanos a {@code System.nanoTime()} in the past
     * @return the same moment as epoch nanoseconds
     */
    static long toEpoch(long monotonicNanos) {
        return epochNanos() - (System.nanoTime() - monotonicNanos);
    }

    /**
     * The error code a failure's text carries ({@code [PEER_LOST] ...}), or {@code fallback}.
     *
     * @param text     a failure's one line
     * @param fallback what to return when it names none
     * @return the code
     */
    static String codeOf(String text, String fallback) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\[([A-Z_]{3,})\\]").matcher(text);
        return m.find() ? m.group(1) : fallback;
    }
}
