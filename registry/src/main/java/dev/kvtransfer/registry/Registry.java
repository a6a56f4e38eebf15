package dev.kvtransfer.registry;

import java.util.List;
import java.util.function.Consumer;

/**
 * The instances of a deployment, behind one interface: instances {@link #register} themselves and keep their
 * entry alive with {@link #heartbeat}; one that stops (crash, {@code kill -9}, partition) is dropped when its
 * lease runs out. Routers {@link #list} and {@link #watch} them. Implementations: {@link EmbeddedRegistry} (in the
 * router's JVM, served by {@link RegistryServer}) and {@link RemoteRegistry} (an instance's client of it).
 */
public interface Registry extends AutoCloseable {
    /**
     * Adds an instance. Refused when another live instance holds the id ({@link RegistryException.Kind#DUPLICATE});
     * the same id with the same incarnation registers again (a retry).
     *
     * @param record the instance
     * @return the lease in milliseconds: heartbeat well within it
     * @throws RegistryException naming the instance and the cause
     */
    long register(InstanceRecord record);

    /**
     * Keeps an instance's entry alive and reports its load.
     *
     * @param id          the instance id
     * @param incarnation its incarnation (a stale process under a reused id is refused)
     * @param load        requests in flight
     * @throws RegistryException {@link RegistryException.Kind#UNKNOWN_INSTANCE} when the entry was dropped: register
     *                           again
     */
    void heartbeat(String id, long incarnation, int load);

    /**
     * Removes an instance (a drained, exiting one). Unknown ids are ignored.
     *
     * @param id          the instance id
     * @param incarnation its incarnation
     */
    void deregister(String id, long incarnation);

    /** @return every live instance, ordered by id */
    List<InstanceRecord> list();

    /**
     * Calls the listener on every join, leave and eviction from now on (on a registry thread; keep it short).
     *
     * @param listener what to call
     * @return closes the subscription
     */
    AutoCloseable watch(Consumer<Event> listener);

    @Override
    void close();

    /**
     * One change.
     *
     * @param type     what happened
     * @param instance the instance (its last known record)
     * @param reason   for a leave: why (deregistered, lease expired after N ms)
     */
    record Event(Type type, InstanceRecord instance, String reason) {
        /** Kinds of change. */
        public enum Type {
            /** Registered. */
            JOINED,
            /** Deregistered itself. */
            LEFT,
            /** Missed its lease. */
            EVICTED
        }
    }
}
