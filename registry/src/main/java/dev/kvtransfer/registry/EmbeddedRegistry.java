package dev.kvtransfer.registry;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * The registry that needs nothing external: a map in the router's JVM. Each entry carries a lease; a sweep every
 * tenth of the lease drops the entries whose lease ran out, so a dead instance leaves within lease + lease / 10.
 * Thread-safe.
 */
public final class EmbeddedRegistry implements Registry {
    private final long leaseNanos;
    private final Map<String, Entry> entries = new ConcurrentHashMap<>();
    private final List<Consumer<Event>> listeners = new CopyOnWriteArrayList<>();
    private final ScheduledExecutorService sweeper;
    private final AtomicLong evictions = new AtomicLong();
    private final AtomicLong duplicates = new AtomicLong();

    private record Entry(InstanceRecord record, long deadlineNanos) {
    }

    /**
     * @param lease how long an entry lives without a heartbeat (at least 100 ms)
     */
    public EmbeddedRegistry(Duration lease) {
        Objects.requireNonNull(lease, "lease");
        if (lease.toMillis() < 100) {
            throw new IllegalArgumentException("registry lease " + lease.toMillis() + " ms: at least 100 ms");
        }
        this.leaseNanos = lease.toNanos();
        this.sweeper = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kvtransfer-registry-sweep");
            t.setDaemon(true);
            return t;
        });
        long period = Math.max(10, lease.toMillis() / 10);
        sweeper.scheduleAtFixedRate(this::sweep, period, period, TimeUnit.MILLISECONDS);
    }

    /** @return the lease in milliseconds */
    public long leaseMillis() {
        return TimeUnit.NANOSECONDS.toMillis(leaseNanos);
    }

    @Override
    public long register(InstanceRecord record) {
        Objects.requireNonNull(record, "record");
        long now = System.nanoTime();
        Entry[] old = new Entry[1];
        entries.compute(record.id(), (id, e) -> {
            if (e != null && e.deadlineNanos - now > 0 && e.record.incarnation() != record.incarnation()) {
                duplicates.incrementAndGet();
                throw new RegistryException(RegistryException.Kind.DUPLICATE, "instance id " + id
                        + " is already registered by a live " + e.record.role() + " instance (" + e.record.controlUrl()
                        + "); pick another --id, or wait " + TimeUnit.NANOSECONDS.toMillis(e.deadlineNanos - now)
                        + " ms for its lease to run out");
            }
            old[0] = e;
            return new Entry(record, now + leaseNanos);
        });
        if (old[0] == null || old[0].record.incarnation() != record.incarnation()) {
            publish(new Event(Event.Type.JOINED, record, "registered"));
        }
        return leaseMillis();
    }

    @Override
    public void heartbeat(String id, long incarnation, int load) {
        Objects.requireNonNull(id, "id");
        long now = System.nanoTime();
        Entry[] expired = new Entry[1];
        Entry e = entries.computeIfPresent(id, (k, v) -> {
            if (v.deadlineNanos - now <= 0) {
                // Expired but not swept yet: expired all the same (a heartbeat never revives a lapsed lease).
                expired[0] = v;
                return null;
            }
            return v.record.incarnation() == incarnation ? new Entry(v.record.withLoad(load), now + leaseNanos) : v;
        });
        if (expired[0] != null) {
            evictions.incrementAndGet();
            publish(new Event(Event.Type.EVICTED, expired[0].record, "no heartbeat for " + leaseMillis() + " ms"));
        }
        if (e == null || e.record.incarnation() != incarnation) {
            throw new RegistryException(RegistryException.Kind.UNKNOWN_INSTANCE, "instance " + id + " (incarnation "
                    + incarnation + ") is not registered: its lease ran out or it never registered; register again");
        }
    }

    @Override
    public void deregister(String id, long incarnation) {
        Objects.requireNonNull(id, "id");
        Entry[] removed = new Entry[1];
        entries.computeIfPresent(id, (k, v) -> {
            if (v.record.incarnation() == incarnation) {
                removed[0] = v;
                return null;
            }
            return v;
        });
        if (removed[0] != null) {
            publish(new Event(Event.Type.LEFT, removed[0].record, "deregistered"));
        }
    }

    @Override
    public List<InstanceRecord> list() {
        long now = System.nanoTime();
        List<InstanceRecord> out = new ArrayList<>();
        for (Entry e : entries.values()) {
            if (e.deadlineNanos - now > 0) {
                out.add(e.record);
            }
        }
        out.sort(Comparator.comparing(InstanceRecord::id));
        return out;
    }

    @Override
    public AutoCloseable watch(Consumer<Event> listener) {
        Objects.requireNonNull(listener, "listener");
        listeners.add(listener);
        return () -> listeners.remove(listener);
    }

    /** @return instances dropped because their lease ran out, since start */
    public long evictions() {
        return evictions.get();
    }

    /** @return registrations refused because a live instance held the id */
    public long duplicatesRefused() {
        return duplicates.get();
    }

    private void sweep() {
        long now = System.nanoTime();
        for (Map.Entry<String, Entry> me : entries.entrySet()) {
            Entry e = me.getValue();
            if (e.deadlineNanos - now <= 0 && entries.remove(me.getKey(), e)) {
                evictions.incrementAndGet();
                publish(new Event(Event.Type.EVICTED, e.record, "no heartbeat for " + leaseMillis() + " ms"));
            }
        }
    }

    private void publish(Event event) {
        for (Consumer<Event> l : listeners) {
            try {
                l.accept(event);
            } catch (RuntimeException e) {
                System.err.println("kvtransfer: registry listener failed on " + event.type() + " "
                        + event.instance().id() + ": " + e);
            }
        }
    }

    @Override
    public void close() {
        sweeper.shutdownNow();
    }
}
