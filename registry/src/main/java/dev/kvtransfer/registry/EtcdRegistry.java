package dev.kvtransfer.registry;

import io.etcd.jetcd.ByteSequence;
import io.etcd.jetcd.Client;
import io.etcd.jetcd.KeyValue;
import io.etcd.jetcd.Watch;
import io.etcd.jetcd.op.Cmp;
import io.etcd.jetcd.op.CmpTarget;
import io.etcd.jetcd.op.Op;
import io.etcd.jetcd.options.GetOption;
import io.etcd.jetcd.options.PutOption;
import io.etcd.jetcd.options.WatchOption;
import io.etcd.jetcd.watch.WatchEvent;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * The registry of a cluster: etcd (Debian's {@code etcd-server}) through the jetcd client. Each instance is one key
 * {@code /kvtransfer/instances/<id>} bound to an etcd lease of the registry's lease time, kept alive by
 * jetcd's keep-alive stream while the process lives ({@link #heartbeat} checks the lease and publishes the load): when an instance dies etcd drops its key as the lease runs out, and
 * every {@link #watch}er sees the delete. Values are JSON {@code {"record": ..., "mac": ...}} sealed with the
 * deployment secret ({@link RegistryAuth#seal}); an entry written without it is skipped by {@link #list} and
 * counted, so anyone who can write to etcd but lacks the secret cannot join or redirect the deployment.
 * A registration is a transaction (put only if the key is unchanged since read), so two live instances never hold
 * one id. Every call has a deadline (longer until etcd first answered: that call also starts the channel); an etcd
 * that cannot be reached is {@link RegistryException.Kind#UNAVAILABLE} with one line naming it.
 */
public final class EtcdRegistry implements Registry {
    /** Key prefix of the instances. */
    static final String PREFIX = "/kvtransfer/instances/";
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(3);
    /**
     * Deadline of the calls until etcd has answered once: the first call also starts gRPC's channel (classes, the
     * connection, HTTP/2), which in a cold JVM on a busy host took longer than {@link #CALL_TIMEOUT}.
     */
    static final Duration FIRST_CALL_TIMEOUT = Duration.ofSeconds(10);
    /** Whether etcd has answered a call of this client. */
    private volatile boolean answered;
    /** gRPC logs its transport choices at INFO through java.util.logging; kept quiet (a strong reference). */
    private static final java.util.logging.Logger GRPC_LOG = java.util.logging.Logger.getLogger("io.grpc");

    static {
        GRPC_LOG.setLevel(java.util.logging.Level.WARNING);
    }

    /** Calls, leases and watches; replaced by a fresh one after etcd could not be reached ({@link #client()}). */
    private volatile Client client;
    private final List<URI> endpointList;
    /** Set when a call found etcd unreachable: the next call first builds a fresh client. */
    private volatile boolean lost;
    private volatile long rebuiltAt = System.nanoTime();
    /** How often at most the client is rebuilt while etcd stays unreachable. */
    static final Duration REBUILD_EVERY = Duration.ofMillis(500);
    private final List<Watching> watches = new java.util.concurrent.CopyOnWriteArrayList<>();
    private final String endpoints;
    private final RegistryAuth auth;
    private final long leaseSeconds;
    private final Map<String, Long> leases = new ConcurrentHashMap<>();
    /** jetcd's keep-alive stream per lease (it renews every third of the TTL while this process lives). */
    private final Map<Long, io.etcd.jetcd.support.CloseableClient> keepAlives = new ConcurrentHashMap<>();

    /** The stored value. */
    record Entry(InstanceRecord record, String mac) {
    }

    /**
     * @param endpoints etcd client URLs, e.g. {@code http://10.0.0.2:2379}
     * @param auth      seals and checks every entry
     * @param lease     lease of an entry (rounded up to whole seconds, at least 2: etcd's smallest TTL)
     */
    public EtcdRegistry(List<URI> endpoints, RegistryAuth auth, Duration lease) {
        Objects.requireNonNull(endpoints, "endpoints");
        this.auth = Objects.requireNonNull(auth, "auth");
        this.leaseSeconds = Math.max(2, (lease.toMillis() + 999) / 1000);
        this.endpoints = endpoints.toString();
        this.endpointList = List.copyOf(endpoints);
        this.client = newClient();
    }

    /*
     * A fresh client for every outage. gRPC reconnects a lost channel with exponential backoff (1 s growing by 1.6
     * each try), so after an outage of 10 s the old channel tried again about 5 s after etcd was back: longer than
     * an entry's lease, which etcd restarts at its full length, so the entries of live instances ran out and were
     * deleted before their keep-alives resumed. A fresh channel connects at once. Calls fail at once while the
     * channel cannot connect (no wait-for-ready), so each beat of an outage tries a fresh one.
     */
    private Client newClient() {
        return Client.builder().endpoints(endpointList.toArray(URI[]::new)).connectTimeout(Duration.ofSeconds(2))
                .retryMaxDuration(Duration.ofSeconds(2)).retryMaxAttempts(2).retryDelay(100).retryMaxDelay(500)
                .waitForReady(false).build();
    }

    /** @return the client, first rebuilt (keep-alives and watches moved to it) when etcd was found unreachable */
    private Client client() {
        if (lost && System.nanoTime() - rebuiltAt >= REBUILD_EVERY.toNanos()) {
            synchronized (this) {
                if (lost && System.nanoTime() - rebuiltAt >= REBUILD_EVERY.toNanos()) {
                    Client old = client;
                    client = newClient();
                    rebuiltAt = System.nanoTime();
                    lost = false;
                    keepAlives.values().forEach(io.etcd.jetcd.support.CloseableClient::close);
                    keepAlives.clear();
                    leases.values().forEach(this::keepAlive);
                    watches.forEach(Watching::restart);
                    old.close();
                }
            }
        }
        return client;
    }

    /**
     * @param url {@code etcd://HOST:PORT[,HOST:PORT...]}
     * @param auth seals and checks every entry
     * @param lease the entries' lease
     * @return the registry
     */
    public static EtcdRegistry open(String url, RegistryAuth auth, Duration lease) {
        String rest = url.substring("etcd://".length());
        List<URI> eps = new ArrayList<>();
        for (String hp : rest.split(",")) {
            String h = hp.endsWith("/") ? hp.substring(0, hp.length() - 1) : hp;
            URI u = URI.create("http://" + h);
            if (u.getHost() == null || u.getPort() < 1) {
                throw new RegistryException(RegistryException.Kind.BAD_REQUEST, "registry URL '" + url
                        + "': expected etcd://HOST:PORT[,HOST:PORT...]");
            }
            eps.add(u);
        }
        return new EtcdRegistry(eps, auth, lease);
    }

    private static ByteSequence bytes(String s) {
        return ByteSequence.from(s, StandardCharsets.UTF_8);
    }

    private <T> T await(CompletableFuture<T> f, String what) {
        Duration timeout = answered ? CALL_TIMEOUT : FIRST_CALL_TIMEOUT;
        try {
            T answer = f.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
            answered = true;
            return answer;
        } catch (TimeoutException e) {
            f.cancel(true);
            lost = true;
            throw new RegistryException(RegistryException.Kind.UNAVAILABLE, "etcd " + endpoints + ": " + what
                    + ": no answer within " + timeout.toMillis() + " ms (is etcd running and reachable?)", e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            String m = String.valueOf(c.getMessage());
            if (m.contains("requested lease not found") || m.contains("lease not found")) {
                throw new RegistryException(RegistryException.Kind.UNKNOWN_INSTANCE, "etcd " + endpoints + ": "
                        + what + ": the lease ran out; register again", c);
            }
            lost = true;
            throw new RegistryException(RegistryException.Kind.UNAVAILABLE, "etcd " + endpoints + ": " + what + ": "
                    + m.replaceAll("\\s+", " "), c);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RegistryException(RegistryException.Kind.UNAVAILABLE, "etcd " + endpoints + ": " + what
                    + ": interrupted", e);
        }
    }

    private byte[] encode(InstanceRecord r) {
        try {
            byte[] rec = ControlHttp.JSON.writeValueAsBytes(r);
            return ControlHttp.JSON.writeValueAsBytes(new Entry(r, auth.seal(rec)));
        } catch (java.io.IOException e) {
            throw new IllegalStateException("cannot encode instance " + r.id(), e);
        }
    }

    /** @return the record, or null when it does not decode or is not sealed with the secret (counted) */
    private InstanceRecord decode(byte[] value) {
        try {
            Entry e = ControlHttp.JSON.readValue(value, Entry.class);
            if (e.record() == null) {
                auth.unseal(new byte[0], null);
                return null;
            }
            byte[] rec = ControlHttp.JSON.writeValueAsBytes(e.record());
            return auth.unseal(rec, e.mac()) ? e.record() : null;
        } catch (java.io.IOException | RuntimeException e) {
            auth.unseal(new byte[0], null); // counted as refused: not an entry of this deployment
            return null;
        }
    }

    @Override
    public long register(InstanceRecord record) {
        Objects.requireNonNull(record, "record");
        ByteSequence key = bytes(PREFIX + record.id());
        String what = "register " + record.id();
        List<KeyValue> kvs = await(client().getKVClient().get(key), what).getKvs();
        long modRevision = 0;
        if (!kvs.isEmpty()) {
            InstanceRecord old = decode(kvs.get(0).getValue().getBytes());
            if (old != null && old.incarnation() != record.incarnation()) {
                throw new RegistryException(RegistryException.Kind.DUPLICATE, "instance id " + record.id()
                        + " is already registered by a live " + old.role() + " instance (" + old.controlUrl()
                        + "); pick another --id, or wait up to " + leaseSeconds + " s for its lease to run out");
            }
            modRevision = kvs.get(0).getModRevision();
        }
        long lease = await(client().getLeaseClient().grant(leaseSeconds), what).getID();
        boolean ok = await(client().getKVClient().txn()
                .If(new Cmp(key, Cmp.Op.EQUAL, CmpTarget.modRevision(modRevision)))
                .Then(Op.put(key, ByteSequence.from(encode(record)), PutOption.builder().withLeaseId(lease).build()))
                .commit(), what).isSucceeded();
        if (!ok) {
            client().getLeaseClient().revoke(lease);
            throw new RegistryException(RegistryException.Kind.DUPLICATE, "instance id " + record.id()
                    + " was registered by another instance at the same moment; pick another --id");
        }
        keepAlive(lease);
        Long previous = leases.put(record.id(), lease);
        if (previous != null && previous != lease) {
            stopKeepAlive(previous);
            client().getLeaseClient().revoke(previous);
        }
        return leaseSeconds * 1000;
    }

    @Override
    public void heartbeat(String id, long incarnation, int load) {
        Long lease = leases.get(id);
        if (lease == null) {
            throw new RegistryException(RegistryException.Kind.UNKNOWN_INSTANCE, "instance " + id
                    + " is not registered here; register again");
        }
        // The keep-alive stream renews the lease; the heartbeat checks it is still held (etcd restarted, a long
        // stop) and publishes the load.
        long ttl = await(client().getLeaseClient().timeToLive(lease, io.etcd.jetcd.options.LeaseOption.DEFAULT),
                "heartbeat " + id).getTTL();
        if (ttl <= 0) {
            leases.remove(id, lease);
            stopKeepAlive(lease);
            throw new RegistryException(RegistryException.Kind.UNKNOWN_INSTANCE, "etcd " + endpoints + ": instance "
                    + id + ": its lease ran out; register again");
        }
        ByteSequence key = bytes(PREFIX + id);
        List<KeyValue> kvs = await(client().getKVClient().get(key), "heartbeat " + id).getKvs();
        InstanceRecord cur = kvs.isEmpty() ? null : decode(kvs.get(0).getValue().getBytes());
        if (cur == null || cur.incarnation() != incarnation) {
            leases.remove(id, lease);
            throw new RegistryException(RegistryException.Kind.UNKNOWN_INSTANCE, "instance " + id
                    + " is no longer in etcd; register again");
        }
        if (cur.load() != load) {
            await(client().getKVClient().put(key, ByteSequence.from(encode(cur.withLoad(load))),
                    PutOption.builder().withLeaseId(lease).build()), "heartbeat " + id);
        }
    }

    @Override
    public void deregister(String id, long incarnation) {
        Long lease = leases.remove(id);
        if (lease != null) {
            stopKeepAlive(lease);
            await(client().getLeaseClient().revoke(lease), "deregister " + id); // the key goes with its lease
        }
    }

    @Override
    public List<InstanceRecord> list() {
        ByteSequence prefix = bytes(PREFIX);
        List<InstanceRecord> out = new ArrayList<>();
        for (KeyValue kv : await(client().getKVClient().get(prefix, GetOption.builder().isPrefix(true).build()),
                "list").getKvs()) {
            InstanceRecord r = decode(kv.getValue().getBytes());
            if (r != null) {
                out.add(r);
            }
        }
        out.sort(Comparator.comparing(InstanceRecord::id));
        return out;
    }

    @Override
    public AutoCloseable watch(Consumer<Event> listener) {
        Watching w = new Watching(Objects.requireNonNull(listener, "listener"));
        watches.add(w);
        w.restart();
        return () -> {
            watches.remove(w);
            w.close();
        };
    }

    /** One watch, moved to the fresh client after an outage and resumed after the last revision it saw. */
    private final class Watching {
        private final Consumer<Event> listener;
        private volatile long seen;
        private Watch.Watcher watcher;

        Watching(Consumer<Event> listener) {
            this.listener = listener;
        }

        synchronized void restart() {
            if (watcher != null) {
                watcher.close();
            }
            WatchOption.Builder o = WatchOption.builder().isPrefix(true).withPrevKV(true);
            if (seen > 0) {
                o.withRevision(seen + 1);
            }
            watcher = client.getWatchClient().watch(bytes(PREFIX), o.build(), resp -> {
                for (WatchEvent e : resp.getEvents()) {
                    seen = Math.max(seen, e.getKeyValue().getModRevision());
                    if (e.getEventType() == WatchEvent.EventType.PUT && e.getKeyValue().getVersion() == 1) {
                        InstanceRecord r = decode(e.getKeyValue().getValue().getBytes());
                        if (r != null) {
                            listener.accept(new Event(Event.Type.JOINED, r, "registered"));
                        }
                    } else if (e.getEventType() == WatchEvent.EventType.DELETE && e.getPrevKV() != null) {
                        InstanceRecord r = decode(e.getPrevKV().getValue().getBytes());
                        if (r != null) {
                            listener.accept(new Event(Event.Type.EVICTED, r,
                                    "its etcd key was deleted (lease expired or deregistered)"));
                        }
                    }
                }
            }, t -> { /* jetcd re-establishes the watch itself; a lost etcd shows up in the calls */ });
        }

        synchronized void close() {
            if (watcher != null) {
                watcher.close();
            }
        }
    }

    /** Starts jetcd's keep-alive stream of a lease (it renews every third of the TTL while this process lives). */
    private void keepAlive(long lease) {
        keepAlives.put(lease, client.getLeaseClient().keepAlive(lease,
                new io.grpc.stub.StreamObserver<io.etcd.jetcd.lease.LeaseKeepAliveResponse>() {
                    @Override
                    public void onNext(io.etcd.jetcd.lease.LeaseKeepAliveResponse r) {
                    }

                    @Override
                    public void onError(Throwable t) {
                        // heartbeat() finds the lease gone and the instance registers again
                    }

                    @Override
                    public void onCompleted() {
                    }
                }));
    }

    private void stopKeepAlive(long lease) {
        io.etcd.jetcd.support.CloseableClient k = keepAlives.remove(lease);
        if (k != null) {
            k.close();
        }
    }

    /** @return entries refused because they were not sealed with the deployment secret */
    public long refused() {
        return auth.refused();
    }

    @Override
    public void close() {
        keepAlives.values().forEach(io.etcd.jetcd.support.CloseableClient::close);
        keepAlives.clear();
        client.close();
    }

    @Override
    public String toString() {
        return "EtcdRegistry{" + endpoints + "}";
    }
}
