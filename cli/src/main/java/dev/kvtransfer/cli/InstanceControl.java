package dev.kvtransfer.cli;

import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.HttpServers;
import dev.kvtransfer.registry.RegistryAuth;

import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The control endpoint of a {@code kvtransfer serve} instance ({@link ControlApi}): health and readiness
 * (unsigned), and the signed calls a router makes. A call for the other role is refused with
 * {@code ROLE_MISMATCH}; while draining, new requests get {@code 503 DRAINING}.
 */
final class InstanceControl implements AutoCloseable {
    private final String id;
    private final String role;
    private final ContextService ctx;
    private final GenerationService gen;
    private final HttpServers.Server server;
    private final AtomicLong served = new AtomicLong();
    private volatile boolean ready;
    private volatile boolean draining;

    InstanceControl(String id, String role, RegistryAuth auth, Listen bind, int workers, ContextService ctx,
                    GenerationService gen) {
        this.id = id;
        this.role = role;
        this.ctx = ctx;
        this.gen = gen;
        this.server = HttpServers.create(bind.socket(), workers, "kvtransfer-control");
        route(auth, "/v1/health", true, (m, p, b) -> ControlHttp.Reply.ok(Map.of(
                "status", draining ? "draining" : "serving", "id", id, "role", role, "load", load(),
                "served", served.get())));
        route(auth, "/v1/ready", true, (m, p, b) -> ready && !draining
                ? ControlHttp.Reply.ok(Map.of("ready", true, "id", id))
                : ControlHttp.Reply.error(503, "NOT_READY", "instance " + id + " is "
                        + (draining ? "draining" : "starting")));
        route(auth, "/v1/context", false, this::context);
        route(auth, "/v1/generation", false, this::generation);
        server.http().start();
    }

    private void route(RegistryAuth auth, String path, boolean open, ControlHttp.Handler h) {
        server.http().createContext(path, ex -> ControlHttp.serve(ex, auth, open, h));
    }

    private ControlHttp.Reply context(String method, String path, byte[] body) throws Exception {
        if (ctx == null) {
            return mismatch(method, path, "context");
        }
        if (method.equals("GET") && path.startsWith("/v1/context/")) {
            long rid = Long.parseLong(path.substring("/v1/context/".length()));
            return ControlHttp.Reply.ok(ctx.outcome(rid));
        }
        if (!method.equals("POST") || !path.equals("/v1/context")) {
            return ControlHttp.Reply.error(404, "BAD_REQUEST", "no route " + method + " " + path);
        }
        if (draining) {
            return drainingReply();
        }
        ControlApi.ContextRequest q = ControlHttp.read(body, ControlApi.ContextRequest.class, method + " " + path);
        try {
            ControlApi.ContextReply r = ctx.start(q);
            served.incrementAndGet();
            return ControlHttp.Reply.ok(r);
        } catch (IllegalStateException e) {
            return ControlHttp.Reply.error(503, "NO_BLOCKS", e.getMessage());
        }
    }

    private ControlHttp.Reply generation(String method, String path, byte[] body) throws Exception {
        if (gen == null) {
            return mismatch(method, path, "generation");
        }
        if (!method.equals("POST") || !path.equals("/v1/generation")) {
            return ControlHttp.Reply.error(404, "BAD_REQUEST", "no route " + method + " " + path);
        }
        if (draining) {
            return drainingReply();
        }
        ControlApi.GenerationRequest q = ControlHttp.read(body, ControlApi.GenerationRequest.class,
                method + " " + path);
        ControlApi.GenerationReply r = gen.receive(q);
        served.incrementAndGet();
        return ControlHttp.Reply.ok(r);
    }

    private ControlHttp.Reply mismatch(String method, String path, String needs) {
        return ControlHttp.Reply.error(409, "ROLE_MISMATCH", method + " " + path + ": instance " + id + " is a "
                + role + " instance, the call needs a " + needs + " one");
    }

    private ControlHttp.Reply drainingReply() {
        return ControlHttp.Reply.error(503, "DRAINING", "instance " + id + " is draining: it takes no new requests");
    }

    /** @return requests in flight */
    int load() {
        return ctx != null ? ctx.load() : gen.load();
    }

    /** @return the bound port */
    int port() {
        return server.address().getPort();
    }

    void ready(boolean v) {
        ready = v;
    }

    /** Stops taking requests (those in flight go on). */
    void drain() {
        draining = true;
    }

    @Override
    public void close() {
        server.stop();
    }
}
