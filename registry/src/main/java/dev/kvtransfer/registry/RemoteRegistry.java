package dev.kvtransfer.registry;

import java.net.URI;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A client of a {@link RegistryServer} (the registry a router embeds): what {@code kvtransfer serve} registers
 * with. {@link #watch} polls the listing (every 500 ms) and reports the differences.
 */
public final class RemoteRegistry implements Registry {
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(5);
    private final ControlHttp.Client client;
    private final ScheduledExecutorService poller = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "kvtransfer-registry-watch");
        t.setDaemon(true);
        return t;
    });

    /**
     * @param url  the registry, {@code http://HOST:PORT}
     * @param auth signs every call
     */
    public RemoteRegistry(URI url, RegistryAuth auth) {
        this.client = new ControlHttp.Client(Objects.requireNonNull(url, "url"), auth, Duration.ofSeconds(3),
                "registry");
    }

    /** Lease of the entries an instance writes into etcd. */
    public static final Duration ETCD_LEASE = Duration.ofSeconds(3);

    /**
     * Opens a registry by URL: {@code http://HOST:PORT} (a router's embedded registry) or
     * {@code etcd://HOST:PORT[,HOST:PORT...]} ({@link EtcdRegistry}, lease {@link #ETCD_LEASE}).
     *
     * @param url  the URL
     * @param auth signs every call
     * @return the client
     * @throws RegistryException one line naming the URL when its scheme is unknown
     */
    public static Registry open(String url, RegistryAuth auth) {
        Objects.requireNonNull(url, "url");
        URI u;
        try {
            u = URI.create(url);
        } catch (IllegalArgumentException e) {
            throw new RegistryException(RegistryException.Kind.BAD_REQUEST, "registry URL '" + url + "': "
                    + e.getMessage());
        }
        if ("etcd".equals(u.getScheme())) {
            return EtcdRegistry.open(url, auth, ETCD_LEASE);
        }
        if (!"http".equals(u.getScheme())) {
            throw new RegistryException(RegistryException.Kind.BAD_REQUEST, "registry URL '" + url
                    + "': unknown scheme '" + u.getScheme() + "' (expected http://HOST:PORT of a router's registry, "
                    + "or etcd://HOST:PORT)");
        }
        return new RemoteRegistry(u, auth);
    }

    @Override
    public long register(InstanceRecord record) {
        return client.call("POST", RegistryServer.PREFIX, record, RegistryServer.Lease.class, CALL_TIMEOUT).leaseMs();
    }

    @Override
    public void heartbeat(String id, long incarnation, int load) {
        client.call("POST", RegistryServer.PREFIX + "/" + id + "/heartbeat", new RegistryServer.Beat(incarnation, load),
                Map.class, CALL_TIMEOUT);
    }

    @Override
    public void deregister(String id, long incarnation) {
        client.call("POST", RegistryServer.PREFIX + "/" + id + "/deregister", new RegistryServer.Beat(incarnation, 0),
                Map.class, CALL_TIMEOUT);
    }

    @Override
    public List<InstanceRecord> list() {
        return client.call("GET", RegistryServer.PREFIX, null, RegistryServer.Listing.class, CALL_TIMEOUT).instances();
    }

    @Override
    public AutoCloseable watch(Consumer<Event> listener) {
        Objects.requireNonNull(listener, "listener");
        Map<String, InstanceRecord> known = new HashMap<>();
        var task = poller.scheduleWithFixedDelay(() -> {
            List<InstanceRecord> now;
            try {
                now = list();
            } catch (RegistryException e) {
                return; // unreachable for now: keep what is known
            }
            Map<String, InstanceRecord> seen = new HashMap<>();
            for (InstanceRecord r : now) {
                seen.put(r.id(), r);
                InstanceRecord old = known.get(r.id());
                if (old == null || old.incarnation() != r.incarnation()) {
                    listener.accept(new Event(Event.Type.JOINED, r, "registered"));
                }
            }
            for (InstanceRecord r : known.values()) {
                InstanceRecord cur = seen.get(r.id());
                if (cur == null || cur.incarnation() != r.incarnation()) {
                    listener.accept(new Event(Event.Type.EVICTED, r, "no longer listed"));
                }
            }
            known.clear();
            known.putAll(seen);
        }, 0, 500, TimeUnit.MILLISECONDS);
        return () -> task.cancel(false);
    }

    @Override
    public void close() {
        poller.shutdownNow();
    }

    @Override
    public String toString() {
        return "RemoteRegistry{" + client.base() + "}";
    }
}
