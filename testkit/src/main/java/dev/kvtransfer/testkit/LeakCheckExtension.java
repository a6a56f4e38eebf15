package dev.kvtransfer.testkit;

import dev.kvtransfer.core.memory.LiveResources;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

/**
 * Fails the test class that leaked (Netty's {@code LeakPresenceExtension} pattern), whoever forgot to close:
 * after the class, every host buffer, staging pool, staging slot and transceiver created during it must be
 * closed ({@link LiveResources}), no thread it started may still run, and it may not have left open file
 * descriptors (sockets, mapped files) beyond a small slack for the JVM's own. Every testkit suite is annotated
 * with it; a backend's or formatter's own tests may add {@code @ExtendWith(LeakCheckExtension.class)} too.
 * Waits are bounded (threads and descriptors get {@link #BOUND} to go away).
 */
public final class LeakCheckExtension implements BeforeAllCallback, AfterAllCallback {
    /** How long threads and file descriptors get to go away after the class. */
    public static final Duration BOUND = Duration.ofSeconds(20);
    /** System property overriding {@link #BOUND} in milliseconds. */
    public static final String BOUND_PROPERTY = "kvtransfer.leakCheckBoundMs";
    /** Descriptors the JVM may open by itself during a class (jar files of classes loaded late). */
    public static final int FD_SLACK = 16;

    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(LeakCheckExtension.class);

    /** What was live when the class started. */
    private record Before(long buffers, long pools, long slots, long transceivers, Set<Thread> threads, int fds) {
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        context.getStore(NS).put("before", new Before(LiveResources.buffers(), LiveResources.pools(),
                LiveResources.slots(), LiveResources.transceivers(), LeakChecks.liveThreads(), openFds()));
    }

    @Override
    public void afterAll(ExtensionContext context) {
        Before b = context.getStore(NS).get("before", Before.class);
        if (b == null) {
            return;
        }
        String cls = context.getRequiredTestClass().getSimpleName();
        long deadline = System.nanoTime() + Long.getLong(BOUND_PROPERTY, BOUND.toMillis()) * 1_000_000L;
        List<String> leaks = leaks(b);
        while (!leaks.isEmpty() && System.nanoTime() < deadline) {
            // Closing is asynchronous in places (a transport's threads end after close returns): wait, bounded.
            java.util.concurrent.locks.LockSupport.parkNanos(50_000_000L);
            leaks = leaks(b);
        }
        if (!leaks.isEmpty()) {
            throw new AssertionError(cls + " leaked: " + String.join("; ", leaks) + " (now " + LiveResources.snapshot()
                    + ")");
        }
        LeakChecks.assertNoNewThreads(b.threads(), Duration.ofSeconds(1));
    }

    private static List<String> leaks(Before b) {
        List<String> out = new ArrayList<>();
        add(out, "host buffers", b.buffers(), LiveResources.buffers());
        add(out, "staging pools", b.pools(), LiveResources.pools());
        add(out, "staging slots", b.slots(), LiveResources.slots());
        add(out, "transceivers", b.transceivers(), LiveResources.transceivers());
        int fds = openFds();
        if (b.fds() >= 0 && fds > b.fds() + FD_SLACK) {
            out.add((fds - b.fds()) + " more open file descriptors than before (" + b.fds() + " -> " + fds + ")");
        }
        long newThreads = LeakChecks.liveThreads().stream().filter(t -> !b.threads().contains(t))
                .filter(t -> LeakChecks.HARNESS_THREAD_PREFIXES.stream().noneMatch(p -> t.getName().startsWith(p)))
                .count();
        if (newThreads > 0) {
            out.add(newThreads + " threads started by the class still run");
        }
        return out;
    }

    private static void add(List<String> out, String what, long before, long now) {
        if (now > before) {
            out.add((now - before) + " " + what + " not closed");
        }
    }

    private static int openFds() {
        Path fds = Path.of("/proc/self/fd");
        if (!Files.isDirectory(fds)) {
            return -1;
        }
        try (Stream<Path> s = Files.list(fds)) {
            return (int) s.count();
        } catch (IOException e) {
            return -1;
        }
    }
}
