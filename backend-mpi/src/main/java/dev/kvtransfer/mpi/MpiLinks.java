package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;

import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The channels of this process: link 0 is its own MPI world (the runtime's envelope and data communicators, MPI
 * source = world rank); links 1.. are intercommunicators to single processes of other MPI worlds, formed by MPI
 * dynamic process management ({@code MPI_Comm_connect} / {@code MPI_Comm_accept} over a port, through Open MPI's
 * {@code ompi-server}): that is how a process that was not started by {@code mpirun} with the job, e.g. a child JVM
 * of a rank, reaches it and is reached. Over a link the remote process is MPI rank 0; its world id and world rank
 * come in a hello when the link forms, so its endpoints keep their addresses {@code rank/endpoint@world}.
 *
 * <p>A process listens (opens a port, native acceptor thread) when it is a singleton not started by
 * {@code mpirun} and a publish/lookup server is configured ({@code OMPI_MCA_pmix_server_uri}, which {@code mpirun
 * --ompi-server} gives its ranks and a rank's child inherits); its addresses then carry the port:
 * {@code rank/endpoint@world~port}. A connect runs on a helper thread ({@code MPI_Comm_connect} has no timeout)
 * bounded by the caller's deadline. Links live until {@code MPI_Finalize}.
 */
final class MpiLinks {
    /** One channel. */
    record Link(int index, int envelopeComm, int dataComm, String world, int worldRank) {
    }

    private final MpiRuntime runtime;
    private volatile Link[] links;
    private final String port;

    MpiLinks(MpiRuntime runtime, int envelopeComm, int dataComm, boolean listen) {
        this.runtime = runtime;
        this.links = new Link[] {new Link(0, envelopeComm, dataComm, runtime.worldId(), -1)};
        this.port = listen ? MpiNative.dpmListen(runtime.worldId(), runtime.worldRank()) : null;
    }

    private final java.util.concurrent.atomic.AtomicInteger connecting = new java.util.concurrent.atomic.AtomicInteger();

    /**
     * @return whether a link may be forming now: a connect of this process is in progress, or this process
     *         listens (an accept can start at any time): the agent then keeps MPI's progress engine turning
     */
    boolean forming() {
        return port != null || connecting.get() > 0;
    }

    /** @return the port other worlds connect to, or null when this process does not listen */
    String port() {
        return port;
    }

    /** @return every link, index = link id (read by the agent each duty cycle) */
    Link[] all() {
        return links;
    }

    Link get(int index) {
        return links[index];
    }

    /** Takes the links the native acceptor formed since the last call (called by the agent). */
    int takeAccepted() {
        if (port == null) {
            return 0;
        }
        int n = 0;
        long[] out = new long[6];
        while (MpiNative.dpmAccepted(out) == 1) {
            add(out);
            n++;
        }
        return n;
    }

    private synchronized Link add(long[] out) {
        String world = String.format("%08x", out[3] & 0xffff_ffffL);
        Link[] a = links;
        Link l = new Link(a.length, (int) out[0], (int) out[1], world, (int) out[4]);
        Link[] b = Arrays.copyOf(a, a.length + 1);
        b[l.index] = l;
        links = b;
        return l;
    }

    /** @return the link to (world, rank), or null */
    Link find(String world, int worldRank) {
        if (world.equals(runtime.worldId())) {
            return links[0];
        }
        for (Link l : links) {
            if (l.index > 0 && l.world.equals(world) && l.worldRank == worldRank) {
                return l;
            }
        }
        return null;
    }

    /**
     * The link to a process of another world, connecting through its port when there is none yet.
     *
     * @throws TransportException {@code TIMEOUT} when the connect does not finish by the deadline (the helper
     *                            thread stays in MPI), {@code NETWORK} when it fails
     */
    synchronized Link connect(String world, int worldRank, String remotePort, long timeoutNanos) {
        Link l = find(world, worldRank);
        if (l != null) {
            return l;
        }
        long[] out = new long[6];
        CompletableFuture<Void> done = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            if (!runtime.enter()) {
                done.completeExceptionally(new IllegalStateException("MPI is finalizing"));
                return;
            }
            try {
                MpiNative.dpmConnect(remotePort, runtime.worldId(), runtime.worldRank(), out);
                done.complete(null);
            } catch (Throwable e) {
                done.completeExceptionally(e);
            } finally {
                runtime.exit();
            }
        }, "kvtransfer-mpi-connect");
        t.setDaemon(true);
        connecting.incrementAndGet();
        t.start();
        try {
            done.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            throw new TransportException(ErrorCode.TIMEOUT, "mpi: connecting to " + worldRank + "@" + world
                    + " through port " + MpiAddress.shorten(remotePort) + " did not finish within "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms");
        } catch (ExecutionException e) {
            throw new TransportException(ErrorCode.NETWORK, "mpi: connecting to " + worldRank + "@" + world
                    + " through port " + MpiAddress.shorten(remotePort) + " failed: " + e.getCause(), e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "mpi: connect interrupted");
        } finally {
            connecting.decrementAndGet();
        }
        Link made = add(out);
        if (!made.world.equals(world) || made.worldRank != worldRank) {
            throw new TransportException(ErrorCode.NETWORK, "mpi: port " + MpiAddress.shorten(remotePort)
                    + " belongs to " + made.worldRank + "@" + made.world + ", not " + worldRank + "@" + world);
        }
        return made;
    }
}
