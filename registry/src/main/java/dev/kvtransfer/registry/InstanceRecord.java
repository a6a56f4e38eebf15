package dev.kvtransfer.registry;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;

import java.util.List;
import java.util.Objects;

/**
 * What one serving instance publishes about itself: who it is, what it serves and how to reach it. The registry
 * treats the cache state as opaque (base64 of {@code CacheState.writeTo}); routers decode it to pair instances.
 *
 * @param id                 the instance id, unique in the deployment (e.g. {@code ctx-a0})
 * @param role               {@code context} or {@code generation}
 * @param incarnation        a fresh value per process start, so a restarted instance is told apart from the one
 *                           that died under the same id
 * @param backend            the transport its ranks use (aeron, ucx, mpi, ...)
 * @param mode               {@code pull} or {@code push} (how a generation instance has the KV moved)
 * @param parallelism        human-readable layout, e.g. {@code TP2 PP1 CP1}
 * @param cacheState         base64 of the instance's {@code CacheState} wire bytes
 * @param transportAddresses each rank's transport address, rank order
 * @param controlUrl         the instance's control endpoint, e.g. {@code http://10.0.0.5:7100}
 * @param load               requests in flight now (reported with every heartbeat)
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record InstanceRecord(String id, String role, long incarnation, String backend, String mode,
                             String parallelism, String cacheState, List<String> transportAddresses,
                             String controlUrl, int load) {
    /** The context role. */
    public static final String CONTEXT = "context";
    /** The generation role. */
    public static final String GENERATION = "generation";

    /** Validates the fields a registry relies on. */
    public InstanceRecord {
        Objects.requireNonNull(id, "id");
        Objects.requireNonNull(role, "role");
        checkId(id);
        if (!CONTEXT.equals(role) && !GENERATION.equals(role)) {
            throw new IllegalArgumentException("instance " + id + ": role '" + role + "': expected " + CONTEXT
                    + " or " + GENERATION);
        }
        transportAddresses = transportAddresses == null ? List.of() : List.copyOf(transportAddresses);
        if (load < 0) {
            throw new IllegalArgumentException("instance " + id + ": load " + load + " is negative");
        }
    }

    /**
     * Checks an instance id: 1..128 characters of {@code A-Z a-z 0-9 . _ -} (it is a URL path segment and an etcd
     * key).
     *
     * @param id the id
     * @return the id
     * @throws IllegalArgumentException naming the id otherwise
     */
    public static String checkId(String id) {
        Objects.requireNonNull(id, "id");
        if (id.isBlank() || id.length() > 128 || !id.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("instance id '" + id + "': 1..128 of A-Z a-z 0-9 . _ -");
        }
        return id;
    }

    /**
     * @param newLoad requests in flight
     * @return this record with another load
     */
    public InstanceRecord withLoad(int newLoad) {
        return new InstanceRecord(id, role, incarnation, backend, mode, parallelism, cacheState, transportAddresses,
                controlUrl, newLoad);
    }

    /** @return whether this is a context instance */
    public boolean isContext() {
        return CONTEXT.equals(role);
    }
}
