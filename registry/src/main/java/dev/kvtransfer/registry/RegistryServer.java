package dev.kvtransfer.registry;

import java.net.InetSocketAddress;
import java.net.URI;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Serves an {@link EmbeddedRegistry} over HTTP/JSON (API version 1, every route under {@code /v1/}), signed with
 * the deployment secret ({@link RegistryAuth}); a refused signature is counted and answered {@code 401}.
 *
 * <pre>
 * POST /v1/registry/instances                    InstanceRecord            -> {"leaseMs": n}
 * POST /v1/registry/instances/{id}/heartbeat     {"incarnation", "load"}   -> {}
 * POST /v1/registry/instances/{id}/deregister    {"incarnation"}           -> {}
 * GET  /v1/registry/instances                                              -> {"instances": [InstanceRecord]}
 * GET  /v1/registry/stats                        -> {"live", "evictions", "duplicatesRefused", "unauthorizedRefused"}
 * GET  /v1/health                                (unsigned)                -> {"status": "ok"}
 * </pre>
 *
 * The router adds its own routes with {@link #route}. Thread-safe.
 */
public final class RegistryServer implements AutoCloseable {
    /** The registry routes' prefix. */
    public static final String PREFIX = "/v1/registry/instances";

    private final EmbeddedRegistry registry;
    private final RegistryAuth auth;
    private final HttpServers.Server server;
    private final Consumer<InstanceRecord> validator;

    /**
     * Starts serving.
     *
     * @param registry  the registry
     * @param auth      signatures to require
     * @param bind      address and port
     * @param validator checks a record before it registers (throws {@link RegistryException} to refuse it)
     */
    public RegistryServer(EmbeddedRegistry registry, RegistryAuth auth, InetSocketAddress bind,
                          Consumer<InstanceRecord> validator) {
        this.registry = Objects.requireNonNull(registry, "registry");
        this.auth = Objects.requireNonNull(auth, "auth");
        this.validator = Objects.requireNonNull(validator, "validator");
        this.server = HttpServers.create(bind, 8, "kvtransfer-registry");
        route("/v1/health", true, (m, p, b) -> ControlHttp.Reply.ok(Map.of("status", "ok")));
        route("/v1/registry/stats", false, (m, p, b) -> ControlHttp.Reply.ok(Map.of(
                "live", registry.list().size(), "evictions", registry.evictions(),
                "duplicatesRefused", registry.duplicatesRefused(), "unauthorizedRefused", auth.refused())));
        route(PREFIX, false, this::instances);
        server.http().start();
    }

    /**
     * Adds a route.
     *
     * @param path    path prefix
     * @param open    whether it needs no signature
     * @param handler the logic
     */
    public void route(String path, boolean open, ControlHttp.Handler handler) {
        server.http().createContext(path, ex -> ControlHttp.serve(ex, auth, open, handler));
    }

    /** Heartbeat body. */
    public record Beat(long incarnation, int load) {
    }

    /** Listing body. */
    public record Listing(List<InstanceRecord> instances) {
    }

    /** Registration reply. */
    public record Lease(long leaseMs) {
    }

    private ControlHttp.Reply instances(String method, String path, byte[] body) throws Exception {
        String rest = path.substring(PREFIX.length());
        if (rest.isEmpty() || rest.equals("/")) {
            if (method.equals("GET")) {
                return ControlHttp.Reply.ok(new Listing(registry.list()));
            }
            if (method.equals("POST")) {
                InstanceRecord r = ControlHttp.read(body, InstanceRecord.class, method + " " + path);
                validator.accept(r);
                return ControlHttp.Reply.ok(new Lease(registry.register(r)));
            }
            return ControlHttp.Reply.error(405, "BAD_REQUEST", method + " " + path + ": GET or POST");
        }
        String[] parts = rest.substring(1).split("/");
        if (parts.length == 2 && method.equals("POST")) {
            Beat beat = ControlHttp.read(body, Beat.class, method + " " + path);
            switch (parts[1]) {
                case "heartbeat" -> registry.heartbeat(parts[0], beat.incarnation(), beat.load());
                case "deregister" -> registry.deregister(parts[0], beat.incarnation());
                default -> {
                    return ControlHttp.Reply.error(404, "BAD_REQUEST", "no route " + method + " " + path);
                }
            }
            return ControlHttp.Reply.ok(Map.of());
        }
        return ControlHttp.Reply.error(404, "BAD_REQUEST", "no route " + method + " " + path);
    }

    /** @return the registry served */
    public EmbeddedRegistry registry() {
        return registry;
    }

    /** @return the authenticator (its refusal count) */
    public RegistryAuth auth() {
        return auth;
    }

    /** @return the URL instances register at, e.g. {@code http://127.0.0.1:7000} */
    public URI url() {
        InetSocketAddress a = server.address();
        return URI.create("http://" + a.getAddress().getHostAddress() + ":" + a.getPort());
    }

    @Override
    public void close() {
        server.stop();
        registry.close();
    }
}
