package dev.kvtransfer.aeron;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.ManyToOneConcurrentArrayQueue;

import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

/**
 * The agent an {@link org.agrona.concurrent.AgentRunner} runs for the managers of one media driver in this process:
 * each duty cycle it lets the shared Aeron client do its conductor work (when it is the first group), then every
 * manager's {@link TransportAgent}. Managers join and leave through queues, so the runner thread alone touches the
 * agent list; a leaving manager's last cleanup runs on this thread, after which nothing of ours touches its state.
 * One group (one thread) serves any number of managers: 64 ranks in one process cost one agent thread, not 64.
 */
final class AgentGroup implements Agent {
    private final String roleName;
    private final AeronRuntime runtime;
    private final boolean invokesClient;
    private final ManyToOneConcurrentArrayQueue<TransportAgent> joining = new ManyToOneConcurrentArrayQueue<>(1024);
    private final ManyToOneConcurrentArrayQueue<TransportAgent> leaving = new ManyToOneConcurrentArrayQueue<>(1024);
    private TransportAgent[] agents = new TransportAgent[0];
    volatile Thread thread;
    private volatile boolean terminated;
    private final Doorbell doorbell;

    AgentGroup(String roleName, AeronRuntime runtime, boolean invokesClient, Doorbell doorbell) {
        this.roleName = roleName;
        this.runtime = runtime;
        this.invokesClient = invokesClient;
        this.doorbell = doorbell;
    }

    /** @return the doorbell peers of this host ring for this group's streams, or null */
    Doorbell doorbell() {
        return doorbell;
    }

    /**
     * Runner thread: whether a manager of the group reads a stream from another host, which rings no doorbell (its
     * idle strategy then parks in short steps first).
     */
    boolean readsRemoteStreams() {
        for (TransportAgent t : agents) {
            io.aeron.Subscription udp = t.m.subscription(false);
            if (udp != null && udp.imageCount() > 0) {
                return true;
            }
        }
        return false;
    }

    @Override
    public void onStart() {
        thread = Thread.currentThread();
    }

    @Override
    public int doWork() {
        int work = 0;
        if (invokesClient) {
            work += runtime.invokeClient();
        }
        TransportAgent a;
        while ((a = joining.poll()) != null) {
            agents = Arrays.copyOf(agents, agents.length + 1);
            agents[agents.length - 1] = a;
            work++;
        }
        while ((a = leaving.poll()) != null) {
            remove(a);
            a.onRemoved();
            work++;
        }
        TransportAgent[] current = agents;
        for (TransportAgent t : current) {
            try {
                work += t.doWork();
            } catch (Throwable e) {
                t.onAgentError(e);
            }
        }
        return work;
    }

    private void remove(TransportAgent a) {
        TransportAgent[] current = agents;
        for (int i = 0; i < current.length; i++) {
            if (current[i] == a) {
                TransportAgent[] next = new TransportAgent[current.length - 1];
                System.arraycopy(current, 0, next, 0, i);
                System.arraycopy(current, i + 1, next, i, current.length - i - 1);
                agents = next;
                return;
            }
        }
    }

    /** Adds a manager's agent; it runs from the next duty cycle. */
    void join(TransportAgent a) {
        while (!joining.offer(a)) {
            Thread.onSpinWait();
        }
        wake();
    }

    /**
     * Removes a manager's agent and waits (bounded) until its last cleanup ran on this group's thread; if the
     * group no longer runs, the cleanup runs here.
     *
     * @return true when the agent's cleanup has run
     */
    boolean leave(TransportAgent a, long timeoutNs) {
        if (terminated || thread == null) {
            a.onRemoved();
            return true;
        }
        while (!leaving.offer(a)) {
            Thread.onSpinWait();
        }
        wake();
        long deadline = System.nanoTime() + timeoutNs;
        while (!a.isRemoved()) {
            if (terminated) {
                // The runner stopped between our offer and its next cycle: nobody else will run the cleanup.
                if (!a.isRemoved()) {
                    a.onRemoved();
                }
                return true;
            }
            if (System.nanoTime() - deadline > 0) {
                return false;
            }
            LockSupport.parkNanos(100_000);
        }
        return true;
    }

    /** Cuts the runner's idle park or doorbell sleep short: a caller has queued work. */
    void wake() {
        Doorbell d = doorbell;
        if (d != null) {
            d.wakeLocal();
        }
        Thread t = thread;
        if (t != null) {
            LockSupport.unpark(t);
        }
    }

    @Override
    public void onClose() {
        terminated = true;
        TransportAgent a;
        while ((a = joining.poll()) != null) {
            a.onRemoved();
        }
        while ((a = leaving.poll()) != null) {
            a.onRemoved();
        }
        for (TransportAgent t : agents) {
            t.onRemoved();
        }
        agents = new TransportAgent[0];
    }

    @Override
    public String roleName() {
        return roleName;
    }
}
