package dev.kvtransfer.registry;

import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The JDK {@link HttpServer}s of kvtransfer (metrics, registry, instance control), hardened the same way:
 *
 * <ul>
 *   <li>a read deadline per connection: a request whose line and headers have not arrived within
 *       {@value #READ_DEADLINE_SECONDS} s is dropped (the JDK server's {@code sun.net.httpserver.maxReqTime},
 *       set here before the first server of the JVM starts unless the operator set it), so a peer holding a
 *       partial request line frees its worker instead of blocking every later request;</li>
 *   <li>a bounded worker pool ({@code workers} threads): exchanges beyond them wait in the queue, each at most
 *       the read deadline once a worker takes it (a rejecting pool would kill the JDK server's dispatcher
 *       thread, which does not catch {@code RejectedExecutionException}).</li>
 * </ul>
 */
public final class HttpServers {
    /** Seconds a connection may take to deliver its request line and headers. */
    public static final long READ_DEADLINE_SECONDS = 5;
    /** The JDK server's read deadline property. */
    static final String MAX_REQ_TIME = "sun.net.httpserver.maxReqTime";
    /** The JDK server's timer period property, in ms (how often deadlines are checked). */
    static final String TIMER_MILLIS = "sun.net.httpserver.timerMillis";

    static {
        // Read once, by the JDK server's configuration class, when the first server starts.
        if (System.getProperty(MAX_REQ_TIME) == null) {
            System.setProperty(MAX_REQ_TIME, Long.toString(READ_DEADLINE_SECONDS));
        }
        if (System.getProperty(TIMER_MILLIS) == null) {
            System.setProperty(TIMER_MILLIS, "500");
        }
    }

    private HttpServers() {
    }

    /** A started server and its worker pool. */
    public record Server(HttpServer http, ExecutorService workers) {
        /** @return the bound address */
        public InetSocketAddress address() {
            return http.getAddress();
        }

        /** Stops at once, waits at most 2 s for the workers. */
        public void stop() {
            http.stop(0);
            workers.shutdownNow();
            try {
                workers.awaitTermination(2, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Creates (not yet started) a server on {@code bind}.
     *
     * @param bind    address and port (0: any free port)
     * @param workers worker threads (1..64)
     * @param name    thread name prefix
     * @return the server: add contexts, then {@code http().start()}
     * @throws UncheckedIOException naming the address when it cannot be bound
     */
    public static Server create(InetSocketAddress bind, int workers, String name) {
        if (workers < 1 || workers > 64) {
            throw new IllegalArgumentException(name + ": workers " + workers + ": must be 1..64");
        }
        HttpServer server;
        try {
            server = HttpServer.create(bind, 64);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot listen on " + bind.getHostString() + ":" + bind.getPort() + " ("
                    + name + "): " + e.getMessage(), e);
        }
        AtomicInteger n = new AtomicInteger();
        ThreadPoolExecutor pool = new ThreadPoolExecutor(workers, workers, 30, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), r -> {
                    Thread t = new Thread(r, name + "-" + server.getAddress().getPort() + "-" + n.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
        server.setExecutor(pool);
        return new Server(server, pool);
    }
}
