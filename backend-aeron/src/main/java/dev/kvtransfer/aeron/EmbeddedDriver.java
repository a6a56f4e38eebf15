package dev.kvtransfer.aeron;

import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.IoUtil;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.PosixFilePermissions;
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
    private static final Map<String, EmbeddedDriver> DRIVERS = new HashMap<>();
    static final String PREFIX = "kvtransfer-aeron-";
    /** rwxr-s---: owner, and the deployment group may enter; the setgid bit passes the group on. */
    private static final int GROUP_DIR_MODE = 02750;

    private final String key;
    private final MediaDriver driver;
    private final File dir;
    private final DriverErrorLog errors;
    private int refs;

    private EmbeddedDriver(String key, MediaDriver driver, File dir, DriverErrorLog errors) {
        this.key = key;
        this.driver = driver;
        this.dir = dir;
        this.errors = errors;
    }

    /** A manager's hold on the shared driver. */
    static final class Lease implements AutoCloseable {
        private final EmbeddedDriver driver;
        private boolean closed;

        private Lease(EmbeddedDriver driver) {
            this.driver = driver;
        }

        /** @return the driver's error handler (counts; tests and counters) */
        DriverErrorLog errors() {
            return driver.errors;
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
                    deleteDirectory(driver.dir);
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
        File[] dirs = base.listFiles((d, n) -> n.startsWith(PREFIX));
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
     * A fresh driver directory for this process: {@code /dev/shm/kvtransfer-aeron-<pid>-<tag><random>/driver} (or in
     * {@code java.io.tmpdir} without {@code /dev/shm}); directories of processes that are gone are deleted first.
     *
     * <p>Why a parent: Aeron deletes and re-creates the driver directory itself at start and creates every file
     * (cnc.dat, the loss report, each log buffer as streams come and go) with this process's umask, usually world
     * readable; Java cannot set a umask per thread. The parent is created here, before the driver exists, as
     * {@code 0700} (or {@code 02750} with its group set to {@code group}: only that group may enter, and what the
     * driver creates inside inherits the group), so no other uid can reach anything below it, whatever mode Aeron
     * gives its files, however late it creates them.
     *
     * @param tag   a word in the name ("host" for the shared driver)
     * @param group the deployment group that may use the driver, or null for owner-only
     */
    static File newDirectory(String tag, String group) {
        File shm = new File("/dev/shm");
        File base = shm.isDirectory() && shm.canWrite() ? shm : new File(System.getProperty("java.io.tmpdir"));
        deleteStale(base);
        File parent = new File(base, PREFIX + ProcessHandle.current().pid() + "-" + tag
                + UUID.randomUUID().toString().substring(0, 8));
        Path p = parent.toPath();
        try {
            // Created 0700 (umask can only take bits away): never visible to anyone else, not even for a moment.
            Files.createDirectory(p, PosixFilePermissions.asFileAttribute(
                    PosixFilePermissions.fromString("rwx------")));
            if (group != null) {
                GroupPrincipal g = p.getFileSystem().getUserPrincipalLookupService().lookupPrincipalByGroupName(group);
                Files.getFileAttributeView(p, PosixFileAttributeView.class).setGroup(g);
                Files.setAttribute(p, "unix:mode", GROUP_DIR_MODE);
            } else {
                Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwx------"));
            }
        } catch (UnsupportedOperationException e) {
            // Not a POSIX file system (no such deployment here): the directory still exists, unprotected.
            parent.mkdirs();
        } catch (IOException e) {
            IoUtil.delete(parent, true);
            throw new UncheckedIOException("aeron: cannot create the media driver directory " + parent
                    + (group == null ? "" : " for group '" + group + "'") + ": " + e, e);
        }
        return new File(parent, "driver");
    }

    /**
     * Tightens what the driver created at start (its directory, cnc.dat, the loss report) to owner-only (or group
     * read-write): the protecting parent is what keeps later files out of reach, this only narrows the modes a
     * listing shows. Best effort: a file the driver removed meanwhile is skipped.
     */
    static void tighten(File dir, String group) {
        // unix:mode, not PosixFilePermissions: a chmod through the latter would clear the setgid bit that passes the
        // deployment group on to the files the driver creates later.
        int dirMode = group == null ? 0700 : 02770;
        int fileMode = group == null ? 0600 : 0660;
        try (var walk = Files.walk(dir.toPath())) {
            walk.forEach(f -> {
                try {
                    Files.setAttribute(f, "unix:mode", Files.isDirectory(f) ? dirMode : fileMode);
                } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
                    // gone meanwhile, or not POSIX: the parent still protects it
                }
            });
        } catch (IOException | UncheckedIOException e) {
            // the directory went away: nothing to tighten
        }
    }

    /** Deletes a driver directory made by {@link #newDirectory} and its protecting parent. */
    static void deleteDirectory(File dir) {
        File parent = dir.getParentFile();
        if (parent != null && parent.getName().startsWith(PREFIX)) {
            IoUtil.delete(parent, true);
        } else {
            IoUtil.delete(dir, true);
        }
    }

    private static EmbeddedDriver launch(AeronSettings s) {
        // An embedded driver serves this process only: owner-only, whatever aeron.dirGroup says.
        File dir = newDirectory("", null);
        MediaDriver.Context ctx = context(s, dir);
        DriverErrorLog errors = (DriverErrorLog) ctx.errorHandler();
        MediaDriver driver;
        try {
            driver = MediaDriver.launch(ctx);
        } catch (RuntimeException | Error e) {
            deleteDirectory(dir);
            throw e;
        }
        tighten(dir, null);
        return new EmbeddedDriver(s.driverKey(), driver, dir, errors);
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
                .errorHandler(new DriverErrorLog(dir.getAbsolutePath()));
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
