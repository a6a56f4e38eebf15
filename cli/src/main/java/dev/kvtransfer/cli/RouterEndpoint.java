package dev.kvtransfer.cli;

import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.EmbeddedRegistry;
import dev.kvtransfer.registry.EtcdRegistry;
import dev.kvtransfer.registry.HttpServers;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.Registry;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RegistryServer;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * What {@code kvtransfer route} listens with: by default the embedded registry served over HTTP (instances register
 * with the router); with {@code --registry etcd://...} the etcd registry, and {@code --listen} serves only the
 * router's own routes. Either way one {@link Registry} to route from.
 */
final class RouterEndpoint implements AutoCloseable {
    private final Registry registry;
    private final RegistryServer server;
    private final HttpServers.Server plain;
    private final RegistryAuth auth;
    private final String describe;
    private final AtomicLong etcdLeaves = new AtomicLong();
    private final AutoCloseable leaveCounter;

    private RouterEndpoint(Registry registry, RegistryServer server, HttpServers.Server plain, RegistryAuth auth,
                           String describe) {
        this.registry = registry;
        this.server = server;
        this.plain = plain;
        this.auth = auth;
        this.describe = describe;
        this.leaveCounter = server != null ? null : registry.watch(e -> {
            if (e.type() != Registry.Event.Type.JOINED) {
                etcdLeaves.incrementAndGet();
            }
        });
    }

    static RouterEndpoint start(String etcdUrl, RegistryAuth auth, Listen bind, Duration lease,
                                Consumer<InstanceRecord> validator) {
        if (etcdUrl == null) {
            RegistryServer s = new RegistryServer(new EmbeddedRegistry(lease), auth, bind.socket(), validator);
            return new RouterEndpoint(s.registry(), s, null, auth, s.url().toString());
        }
        EtcdRegistry etcd = EtcdRegistry.open(etcdUrl, auth, lease);
        try {
            etcd.list(); // reachable now, or one line naming it
            HttpServers.Server plain = HttpServers.create(bind.socket(), 4, "kvtransfer-router");
            plain.http().start();
            return new RouterEndpoint(etcd, null, plain, auth, etcdUrl + " (router endpoint http://"
                    + plain.address().getAddress().getHostAddress() + ":" + plain.address().getPort() + ")");
        } catch (RuntimeException e) {
            etcd.close();
            throw e;
        }
    }

    Registry registry() {
        return registry;
    }

    String describe() {
        return describe;
    }

    /** @return instances that left without deregistering (embedded: evictions; etcd: keys deleted) */
    long evictions() {
        return server != null ? server.registry().evictions() : etcdLeaves.get();
    }

    void route(String path, ControlHttp.Handler handler) {
        if (server != null) {
            server.route(path, false, handler);
        } else {
            plain.http().createContext(path, ex -> ControlHttp.serve(ex, auth, false, handler));
        }
    }

    @Override
    public void close() throws Exception {
        if (leaveCounter != null) {
            leaveCounter.close();
        }
        if (server != null) {
            server.close();
        } else {
            plain.stop();
            registry.close();
        }
    }
}
