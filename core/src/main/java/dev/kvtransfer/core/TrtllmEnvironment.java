package dev.kvtransfer.core;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * TensorRT-LLM's {@code TRTLLM_*} environment variables as aliases of the matching {@code kvtransfer.*} keys, so
 * a deployment configured for TensorRT-LLM's cache transceiver keeps its settings. An explicit {@code kvtransfer.*}
 * key always wins over its alias. Upstream's booleans are {@code 1} / {@code 0}; {@code 1} exactly means on, as
 * upstream reads them.
 *
 * <table>
 *   <caption>Aliases</caption>
 *   <tr><th>variable</th><th>key</th></tr>
 *   <tr><td>TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE</td><td>kvtransfer.transferBufferBytes (same units)</td></tr>
 *   <tr><td>TRTLLM_KVCACHE_SEND_MAX_CONCURRENCY_NUM</td><td>kvtransfer.sendConcurrency</td></tr>
 *   <tr><td>TRTLLM_KVCACHE_RECV_BUFFER_COUNT</td><td>kvtransfer.recvSlots</td></tr>
 *   <tr><td>TRTLLM_ENABLE_KVCACHE_RECEIVE_PARALLEL</td><td>kvtransfer.parallelReceive</td></tr>
 *   <tr><td>TRTLLM_KVCACHE_TIME_OUTPUT_PATH</td><td>kvtransfer.timingDir</td></tr>
 *   <tr><td>TRTLLM_USE_UCX_KVCACHE / TRTLLM_USE_MPI_KVCACHE</td><td>kvtransfer.backend = ucx / mpi</td></tr>
 * </table>
 *
 * {@code TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER} has no key: the formatters decide zero copy themselves (the
 * standard and MLA ones move contiguous runs straight from / into the pools above a message-size threshold),
 * with the same bytes either way; its value is still checked ({@code 1} or {@code 0}).
 *
 * <p>{@code TRTLLM_USE_NIXL_KVCACHE} and {@code TRTLLM_USE_MOONCAKE_KVCACHE} name backends kvtransfer does not have:
 * set to 1 they are refused naming what is available, never silently replaced.
 */
public final class TrtllmEnvironment {
    /** Variable to key, for the aliases that map one to one. */
    public static final Map<String, String> ALIASES;

    static {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE", TransceiverConfig.P_TRANSFER_BUFFER_BYTES);
        m.put("TRTLLM_KVCACHE_SEND_MAX_CONCURRENCY_NUM", TransceiverConfig.P_SEND_CONCURRENCY);
        m.put("TRTLLM_KVCACHE_RECV_BUFFER_COUNT", TransceiverConfig.P_RECV_SLOTS);
        m.put("TRTLLM_ENABLE_KVCACHE_RECEIVE_PARALLEL", TransceiverConfig.P_PARALLEL_RECEIVE);
        m.put("TRTLLM_KVCACHE_TIME_OUTPUT_PATH", TransceiverConfig.P_TIMING_DIR);
        ALIASES = java.util.Collections.unmodifiableMap(m);
    }

    private static final Map<String, String> BACKENDS = Map.of("TRTLLM_USE_UCX_KVCACHE", "ucx",
            "TRTLLM_USE_MPI_KVCACHE", "mpi");
    /** Accepted and checked, mapped to no key (see the class comment). */
    public static final String ZERO_COPY = "TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER";
    private static final String[] FOREIGN_BACKENDS = {"TRTLLM_USE_NIXL_KVCACHE", "TRTLLM_USE_MOONCAKE_KVCACHE"};

    private TrtllmEnvironment() {
    }

    /**
     * The {@code kvtransfer.*} properties that the environment's {@code TRTLLM_*} variables stand for, with the
     * explicit properties laid over them.
     *
     * @param properties explicit properties (they win)
     * @param environment the process environment (or any map of variables)
     * @return the merged properties, ready for {@link TransceiverConfig#fromProperties(Map)}
     * @throws IllegalArgumentException naming the variable when it names a backend kvtransfer lacks, when two
     *                                  backend variables are on, or when its value cannot be read
     */
    public static Map<String, String> merge(Map<String, String> properties, Map<String, String> environment) {
        Objects.requireNonNull(properties, "properties");
        Objects.requireNonNull(environment, "environment");
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, String> a : ALIASES.entrySet()) {
            String v = environment.get(a.getKey());
            if (v == null || v.isBlank()) {
                continue;
            }
            String key = a.getValue();
            if (key.equals(TransceiverConfig.P_PARALLEL_RECEIVE)) {
                v = flag(a.getKey(), v) ? "true" : "false";
            }
            out.put(key, v.trim());
        }
        String zcopy = environment.get(ZERO_COPY);
        if (zcopy != null) {
            flag(ZERO_COPY, zcopy); // no key: the formatters decide zero copy
        }
        String backend = null;
        for (Map.Entry<String, String> b : BACKENDS.entrySet()) {
            String v = environment.get(b.getKey());
            if (v != null && flag(b.getKey(), v)) {
                if (backend != null) {
                    throw new IllegalArgumentException("TRTLLM_USE_*_KVCACHE: more than one backend is set to 1 ("
                            + backend + " and " + b.getValue() + ")");
                }
                backend = b.getValue();
            }
        }
        for (String f : FOREIGN_BACKENDS) {
            String v = environment.get(f);
            if (v != null && flag(f, v)) {
                throw new IllegalArgumentException(f + " = 1: kvtransfer has no such backend; use "
                        + TransceiverConfig.P_BACKEND + " = aeron, ucx or mpi (or TRTLLM_USE_UCX_KVCACHE / "
                        + "TRTLLM_USE_MPI_KVCACHE)");
            }
        }
        if (backend != null) {
            out.put(TransceiverConfig.P_BACKEND, backend);
        }
        out.putAll(properties);
        return out;
    }

    /**
     * The config the process environment and the given properties describe.
     *
     * @param properties explicit properties (they win over the environment's aliases)
     * @return the validated config
     */
    public static TransceiverConfig config(Map<String, String> properties) {
        return TransceiverConfig.fromProperties(merge(properties, System.getenv()));
    }

    private static boolean flag(String variable, String v) {
        String s = v.trim();
        if (s.equals("1")) {
            return true;
        }
        if (s.equals("0") || s.isEmpty()) {
            return false;
        }
        throw new IllegalArgumentException(variable + " = '" + v + "': TensorRT-LLM reads 1 (on) or 0 (off)");
    }
}
