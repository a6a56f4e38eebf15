package dev.kvtransfer.aeron;

import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.IoUtil;

import java.io.File;
import java.lang.System.Logger.Level;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * The media driver embedded in this process, shared by every manager with the same driver settings and
 * reference-counted: the first {@link #acquire} launches it in a private directory, the last
 * {@link Lease#close()} stops its threads and deletes the directory. One driver per process keeps the idle
 * CPU to one backing-off thread however many ranks the process hosts.
 */
final class EmbeddedDriver {
    private static final System.Logger LOG = System.getLogger(EmbeddedDriver.class.getName());
    private static final Map<String, EmbeddedDriver> DRIVERS = new HashMap<>();

    private final String key;
    private final MediaDriver driver;
    private final File dir;
    private int refs;

    private EmbeddedDriver(String key, MediaDriver driver, File dir) {
        this.key = key;
        this.driver = driver;
        this.dir = dir;
    }

    /** A manager's hold on the shared driver. */
    static final class Lease implements AutoCloseable {
        private final EmbeddedDriver driver;
        private boolean closed;

        private Lease(EmbeddedDriver driver) {
            this.driver = driver;
        }

        /** @return the driver's directory, for the Aeron client */
        String directory() {
            return driver.dir.getAbsolutePath();
        }

        @Override
        public void close() {
            synchronized (DRIVERS) {
                if (closed) {
                    return;
                }
                closed = true;
                if (--driver.refs == 0) {
                    DRIVERS.remove(driver.key);
                    driver.driver.close();
                    // dirDeleteOnShutdown already removed it; this covers a driver that failed half-way.
                    IoUtil.delete(driver.dir, true);
                }
            }
        }
    }

    /**
     * Takes a lease on the driver for these settings, launching it when none runs.
     *
     * @param settings the manager's settings
     * @return the lease; close it once
     */
    static Lease acquire(AeronSettings settings) {
        synchronized (DRIVERS) {
            EmbeddedDriver d = DRIVERS.get(settings.driverKey());
            if (d == null) {
                d = launch(settings);
                DRIVERS.put(d.key, d);
            }
            d.refs++;
            return new Lease(d);
        }
    }

    /** @return how many embedded drivers this process runs now (tests check that close released them) */
    static int running() {
        synchronized (DRIVERS) {
            return DRIVERS.size();
        }
    }

    /**
     * Deletes the directories of embedded drivers whose process is gone (killed before it could clean up):
     * the name carries the owner's pid.
     */
    private static void deleteStale(File base) {
        File[] dirs = base.listFiles((d, n) -> n.startsWith("kvtransfer-aeron-"));
        if (dirs == null) {
            return;
        }
        for (File d : dirs) {
            String[] parts = d.getName().split("-");
            try {
                long pid = Long.parseLong(parts[2]);
                if (ProcessHandle.of(pid).isEmpty()) {
                    IoUtil.delete(d, true);
                }
            } catch (RuntimeException e) {
                // not ours or not parseable: leave it
            }
        }
    }

    /**
     * A fresh driver directory for this process: {@code /dev/shm/kvtransfer-aeron-<pid>-<tag><random>} (or in
     * {@code java.io.tmpdir} without {@code /dev/shm}); directories of processes that are gone are deleted first.
     */
    static File newDirectory(String tag) {
        File shm = new File("/dev/shm");
        File base = shm.isDirectory() && shm.canWrite() ? shm : new File(System.getProperty("java.io.tmpdir"));
        deleteStale(base);
        return new File(base, "kvtransfer-aeron-" + ProcessHandle.current().pid() + "-" + tag
                + UUID.randomUUID().toString().substring(0, 8));
    }

    private static EmbeddedDriver launch(AeronSettings s) {
        File dir = newDirectory("");
        MediaDriver.Context ctx = context(s, dir);
        MediaDriver driver = MediaDriver.launch(ctx);
        return new EmbeddedDriver(s.driverKey(), driver, dir);
    }

    /**
     * The media driver's settings for ours (embedded, or standalone from {@link SharedDriverMain}): term and MTU,
     * socket buffers and receiver window, the liveness timeouts that make peer loss detectable, and the idle
     * strategy; the directory is deleted when the driver stops.
     */
    static MediaDriver.Context context(AeronSettings s, File dir) {
        MediaDriver.Context ctx = new MediaDriver.Context()
                .aeronDirectoryName(dir.getAbsolutePath())
                .dirDeleteOnStart(true)
                .dirDeleteOnShutdown(true)
                .warnIfDirectoryExists(false)
                .threadingMode(s.threading)
                .termBufferSparseFile(true)
                .mtuLength(s.mtu)
                .publicationTermBufferLength(s.termLength)
                .ipcTermBufferLength(s.termLength)
                .socketRcvbufLength(s.socketBuffer)
                .socketSndbufLength(s.socketBuffer)
                .initialWindowLength(s.receiverWindow())
                // Peer failure detection: an image without data or heartbeat for this long goes away, and a
                // publication without status messages for this long reports "not connected".
                .imageLivenessTimeoutNs(s.peerTimeoutNs)
                .publicationConnectionTimeoutNs(s.peerTimeoutNs)
                // A client silent for this long (its process stalled) is dropped; Aeron wants the unblock timeout
                // of a stuck publication beyond it.
                .clientLivenessTimeoutNs(s.clientTimeoutNs)
                .publicationUnblockTimeoutNs(s.clientTimeoutNs + TimeUnit.SECONDS.toNanos(5))
                .timerIntervalNs(TimeUnit.MILLISECONDS.toNanos(100))
                .publicationLingerTimeoutNs(TimeUnit.MILLISECONDS.toNanos(200))
                .errorHandler(t -> LOG.log(Level.WARNING, "aeron media driver error in " + dir, t));
        if (s.threading == ThreadingMode.SHARED) {
            ctx.sharedIdleStrategy(s.newIdleStrategy());
        } else if (s.threading == ThreadingMode.SHARED_NETWORK) {
            ctx.sharedNetworkIdleStrategy(s.newIdleStrategy()).conductorIdleStrategy(s.newIdleStrategy());
        } else {
            ctx.conductorIdleStrategy(s.newIdleStrategy())
                    .senderIdleStrategy(s.newIdleStrategy())
                    .receiverIdleStrategy(s.newIdleStrategy());
        }
        return ctx;
    }
}
