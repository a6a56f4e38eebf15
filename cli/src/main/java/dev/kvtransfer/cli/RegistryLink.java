package dev.kvtransfer.cli;

import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.Registry;
import dev.kvtransfer.registry.RegistryException;
import dev.kvtransfer.registry.RemoteRegistry;

import java.io.PrintStream;
import java.util.Locale;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;

/**
 * An instance's entry in the registry: registered at start (a failure there ends {@code serve} with one line),
 * then a heartbeat with the load every period. When the registry has dropped the entry (a lease that ran out
 * while the instance was stopped, a restarted router) it registers again; while the registry is unreachable the
 * instance keeps serving and says so once per outage.
 */
final class RegistryLink implements AutoCloseable {
    private final Registry registry;
    private final InstanceRecord record;
    private final IntSupplier load;
    private final PrintStream out;
    private final ScheduledExecutorService beat = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "kvtransfer-heartbeat");
        t.setDaemon(true);
        return t;
    });
    private volatile boolean outage;

    private RegistryLink(Registry registry, InstanceRecord record, IntSupplier load, PrintStream out) {
        this.registry = registry;
        this.record = record;
        this.load = load;
        this.out = out;
    }

    /**
     * Registers and starts the heartbeats.
     *
     * @param r        the registry (from {@link RemoteRegistry#open}, checked before the instance started); closed
     *                 with the link, or here when registering fails
     * @param record   the instance
     * @param periodMs heartbeat period
     * @param load     the load to report
     * @param out      where state changes are printed
     * @return the link
     */
    static RegistryLink start(Registry r, InstanceRecord record, long periodMs, IntSupplier load, PrintStream out) {
        RegistryLink link = new RegistryLink(r, record, load, out);
        try {
            long lease = r.register(record);
            if (lease <= periodMs) {
                throw new IllegalArgumentException("--heartbeat-ms " + periodMs + " is not below the registry's lease ("
                        + lease + " ms): the entry would expire between heartbeats");
            }
        } catch (RuntimeException e) {
            r.close();
            link.beat.shutdownNow();
            throw e;
        }
        link.beat.scheduleWithFixedDelay(link::beat, periodMs, periodMs, TimeUnit.MILLISECONDS);
        return link;
    }

    private void beat() {
        try {
            try {
                registry.heartbeat(record.id(), record.incarnation(), load.getAsInt());
            } catch (RegistryException e) {
                if (e.kind() != RegistryException.Kind.UNKNOWN_INSTANCE) {
                    throw e;
                }
                registry.register(record.withLoad(load.getAsInt()));
                say("registered again (the registry had dropped this instance)");
            }
            if (outage) {
                outage = false;
                say("registry reachable again");
            }
        } catch (RegistryException e) {
            if (!outage) {
                outage = true;
                say("heartbeat failed, still serving known peers: " + e.getMessage());
            }
        } catch (RuntimeException e) {
            say("heartbeat failed: " + CliErrors.oneLine(e));
        }
    }

    private void say(String line) {
        out.printf(Locale.ROOT, "%-18s %s%n", "registry", line);
        out.flush();
    }

    /** Stops the heartbeats and removes the entry (best effort: a registry that is gone lets the lease expire). */
    void deregister() {
        beat.shutdownNow();
        try {
            registry.deregister(record.id(), record.incarnation());
            say("deregistered " + record.id());
        } catch (RegistryException e) {
            say("could not deregister (the lease will expire): " + e.getMessage());
        }
    }

    @Override
    public void close() {
        beat.shutdownNow();
        registry.close();
    }
}
