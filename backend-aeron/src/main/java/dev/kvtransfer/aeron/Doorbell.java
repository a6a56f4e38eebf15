package dev.kvtransfer.aeron;

import org.agrona.CloseHelper;
import org.agrona.concurrent.UnsafeBuffer;

import java.io.IOException;
import java.lang.System.Logger.Level;
import java.lang.invoke.VarHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.DatagramChannel;
import java.nio.channels.FileChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Wakes a sleeping agent thread when a peer of this host offers it a message, so an exchange that starts after a
 * quiet spell does not wait for the end of the agent's idle park (up to 1 ms on every hop; a request's first hop
 * after an idle gap waited about half of that). Aeron IPC itself has no wake-up: a subscriber learns of a message
 * only by polling.
 *
 * <p>One doorbell per agent group (thread): a loopback UDP socket in a {@link Selector}, and per IPC stream the
 * group serves a 64-byte file {@code <aeron dir>/kvtransfer-doorbell-<stream>} holding the flag and the port,
 * owner-only like the driver's own files (group read-write when the driver directory is open to a deployment group,
 * {@code aeron.dirGroup}, whose setgid directory gives the file its group). Before a long sleep the agent sets every flag to {@link #ASLEEP} and runs one more duty cycle; a sender
 * that offered to the stream and then reads {@link #ASLEEP} swaps it to {@link #RUNG} and sends one datagram (a
 * sender of this process calls {@link Selector#wakeup()} instead). The flag store and the sender's read are both
 * ordered after the writes they follow (volatile store, full fence), so either the agent's last cycle sees the
 * message or the sender sees the flag: no lost wake-up. The sleep keeps its 1 ms bound, so timers and peers
 * without a doorbell (other hosts, another uid, the setting off) are served as before.
 *
 * <p>Anyone on the host who can send to the port can only cause spurious wake-ups; a flag left wrong (a peer of
 * the same uid writing it) costs at most the old park, never a message.
 */
final class Doorbell implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(Doorbell.class.getName());
    static final String FILE_PREFIX = "kvtransfer-doorbell-";
    static final long AWAKE = 0;
    static final long ASLEEP = 1;
    static final long RUNG = 2;
    static final int FLAG_AT = 0;
    static final int PORT_AT = 8;
    static final int MAGIC_AT = 12;
    static final int PID_AT = 16;
    static final int FILE_BYTES = 64;
    static final int MAGIC = 0x4B56_4442;
    /** How long a sender waits before it looks for a doorbell it did not find again. */
    static final long RETRY_NS = TimeUnit.MILLISECONDS.toNanos(100);

    /** The doorbells of this process by file, so a sender here wakes the agent without a datagram. */
    private static final Map<Path, Doorbell> LOCAL = new ConcurrentHashMap<>();
    /** Tests: ring by datagram even when the doorbell is in this process. */
    static volatile boolean datagramsOnly;

    private final Path directory;
    private final DatagramChannel channel;
    private final Selector selector;
    private final int port;
    private final ByteBuffer drain = ByteBuffer.allocateDirect(64);
    private final Map<Integer, Bell> byStream = new ConcurrentHashMap<>();
    private volatile Bell[] bells = new Bell[0];
    private volatile boolean armed;
    /** Sleeps ended by a datagram: a ring from another process (or a stray datagram). */
    final AtomicLong wakes = new AtomicLong();
    /** Sleeps cut short by a wake-up of this process (a local ring, queued work). */
    final AtomicLong localWakes = new AtomicLong();
    /** Sleeps that ran to their bound. */
    final AtomicLong timeouts = new AtomicLong();

    /**
     * One stream's flag: the file and a view of its mapping (the view holds the mapping until GC, so a late store
     * never hits unmapped memory).
     */
    private record Bell(int stream, Path file, UnsafeBuffer flag) {
    }

    private Doorbell(Path directory, DatagramChannel channel, Selector selector, int port) {
        this.directory = directory;
        this.channel = channel;
        this.selector = selector;
        this.port = port;
    }

    /**
     * Opens a doorbell for the streams of one agent group.
     *
     * @param aeronDirectory the media driver's directory
     * @return the doorbell, or null when it cannot be made here (the agent then parks as before)
     */
    static Doorbell open(String aeronDirectory) {
        DatagramChannel ch = null;
        Selector sel = null;
        try {
            Path dir = Path.of(aeronDirectory);
            if (!Files.isDirectory(dir)) {
                throw new IOException("no driver directory " + dir);
            }
            ch = DatagramChannel.open(StandardProtocolFamily.INET);
            ch.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            ch.configureBlocking(false);
            sel = Selector.open();
            ch.register(sel, SelectionKey.OP_READ);
            int p = ((InetSocketAddress) ch.getLocalAddress()).getPort();
            return new Doorbell(dir, ch, sel, p);
        } catch (IOException | RuntimeException e) {
            LOG.log(Level.DEBUG, "aeron doorbell: not available in " + aeronDirectory + " (" + e + "); idle agents park");
            CloseHelper.quietCloseAll(ch, sel);
            return null;
        }
    }

    int port() {
        return port;
    }

    /** @return the file of a stream's flag on the driver in {@code aeronDirectory} */
    static Path file(String aeronDirectory, int stream) {
        return Path.of(aeronDirectory, FILE_PREFIX + stream);
    }

    /**
     * Publishes a stream's flag. Failure is not an error: senders then find no doorbell and the agent's sleep keeps
     * its bound.
     *
     * @return whether the flag file was made
     */
    boolean register(int stream) {
        Path f = directory.resolve(FILE_PREFIX + stream);
        try (FileChannel fc = FileChannel.open(f, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            boolean group = Files.getPosixFilePermissions(directory).contains(PosixFilePermission.GROUP_EXECUTE);
            Files.setPosixFilePermissions(f, PosixFilePermissions.fromString(group ? "rw-rw----" : "rw-------"));
            MappedByteBuffer m = fc.map(FileChannel.MapMode.READ_WRITE, 0, FILE_BYTES);
            UnsafeBuffer b = new UnsafeBuffer(m);
            b.putInt(PORT_AT, port);
            b.putLong(PID_AT, ProcessHandle.current().pid());
            b.putLongVolatile(FLAG_AT, armed ? ASLEEP : AWAKE);
            b.putIntVolatile(MAGIC_AT, MAGIC);
            Bell bell = new Bell(stream, f, b);
            synchronized (this) {
                byStream.put(stream, bell);
                bells = byStream.values().toArray(new Bell[0]);
            }
            LOCAL.put(f.toAbsolutePath(), this);
            return true;
        } catch (IOException | RuntimeException e) {
            LOG.log(Level.DEBUG, "aeron doorbell: cannot publish " + f + " (" + e + ")");
            return false;
        }
    }

    /** Withdraws a stream's flag (the manager closes). */
    void unregister(int stream) {
        Bell b;
        synchronized (this) {
            b = byStream.remove(stream);
            bells = byStream.values().toArray(new Bell[0]);
        }
        if (b != null) {
            LOCAL.remove(b.file.toAbsolutePath(), this);
            b.flag.putLongVolatile(FLAG_AT, RUNG); // a sender that still holds it never rings it again
            b.flag.putIntVolatile(MAGIC_AT, 0);
            try {
                Files.deleteIfExists(b.file);
            } catch (IOException e) {
                LOG.log(Level.DEBUG, "aeron doorbell: cannot delete " + b.file + " (" + e + ")");
            }
        }
    }

    /** Agent thread: tells senders to ring from now on; the caller then runs one more duty cycle before it sleeps. */
    void arm() {
        armed = true;
        for (Bell b : bells) {
            b.flag.putLongVolatile(FLAG_AT, ASLEEP);
        }
    }

    /** Agent thread: senders need not ring. */
    void disarm() {
        armed = false;
        for (Bell b : bells) { // a withdrawn bell is no longer in the array: its RUNG stays
            b.flag.putLongVolatile(FLAG_AT, AWAKE);
        }
    }

    boolean isArmed() {
        return armed;
    }

    /**
     * Agent thread, after {@link #arm} and a duty cycle that found nothing: sleeps until a ring, a local wake-up or
     * the bound, then disarms and drains the socket.
     *
     * @param maxNs the bound (rounded up to whole milliseconds, at least 1)
     */
    void sleep(long maxNs) {
        try {
            long ms = Math.max(1, TimeUnit.NANOSECONDS.toMillis(maxNs + 999_999));
            long start = System.nanoTime();
            int n = selector.select(ms);
            disarm();
            if (n > 0) {
                selector.selectedKeys().clear();
                drain.clear();
                while (channel.receive(drain) != null) {
                    drain.clear();
                }
            }
            // A local wake-up selects nothing: told apart from the bound by the time slept.
            (n > 0 ? wakes : System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(ms) ? localWakes : timeouts)
                    .incrementAndGet();
        } catch (IOException | java.nio.channels.ClosedSelectorException e) {
            disarm(); // closing (the runner stops after this cycle), or a failed select: the bound still holds
            LOG.log(Level.DEBUG, "aeron doorbell: select failed (" + e + ")");
        }
    }

    /** Any thread of this process that queued work for the agent: cuts its sleep short when it sleeps. */
    void wakeLocal() {
        VarHandle.fullFence();
        if (armed) {
            selector.wakeup();
        }
    }

    @Override
    public void close() {
        Integer[] streams;
        synchronized (this) {
            streams = byStream.keySet().toArray(new Integer[0]);
        }
        for (int s : streams) {
            unregister(s);
        }
        CloseHelper.quietCloseAll(selector, channel);
    }

    @Override
    public String toString() {
        return "Doorbell{port=" + port + ", streams=" + Arrays.toString(byStream.keySet().toArray()) + "}";
    }

    /**
     * The sender's side for one peer stream: after an offer, {@link #ring} wakes the peer's agent if it sleeps. Not
     * thread-safe: one connection's offers hold its offer lock.
     */
    static final class Target {
        private final Path file;
        private final int stream;
        private UnsafeBuffer flag;
        private Doorbell local;
        private InetSocketAddress to;
        private long retryAtNs;
        private boolean tried;
        /** Datagrams and local wake-ups this target sent. */
        long rings;

        Target(String aeronDirectory, int stream) {
            this.file = file(aeronDirectory, stream).toAbsolutePath();
            this.stream = stream;
        }

        /**
         * After a successful offer: wakes the peer's agent when its flag says it sleeps.
         *
         * @return whether it rang
         */
        boolean ring() {
            UnsafeBuffer f = flag;
            if (f == null && (f = find()) == null) {
                return false;
            }
            VarHandle.fullFence(); // the offer's ordered store before the flag's load
            if (f.getLongVolatile(FLAG_AT) == ASLEEP && f.compareAndSetLong(FLAG_AT, ASLEEP, RUNG)) {
                rings++;
                Doorbell d = local;
                if (d != null) {
                    d.selector.wakeup();
                } else {
                    Sender.send(to);
                }
                return true;
            }
            return false;
        }

        private UnsafeBuffer find() {
            long now = System.nanoTime();
            if (tried && now - retryAtNs < 0) {
                return null;
            }
            tried = true;
            retryAtNs = now + RETRY_NS;
            Doorbell d = datagramsOnly ? null : LOCAL.get(file);
            if (d != null) {
                Bell b = d.byStream.get(stream);
                if (b != null) {
                    local = d;
                    flag = b.flag;
                    return flag;
                }
            }
            try (FileChannel fc = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                if (fc.size() < FILE_BYTES) {
                    return null;
                }
                MappedByteBuffer m = fc.map(FileChannel.MapMode.READ_WRITE, 0, FILE_BYTES);
                UnsafeBuffer b = new UnsafeBuffer(m);
                int p = b.getInt(PORT_AT);
                if (b.getIntVolatile(MAGIC_AT) != MAGIC || p <= 0 || p > 65535) {
                    return null;
                }
                to = new InetSocketAddress(InetAddress.getLoopbackAddress(), p);
                flag = b;
                return b;
            } catch (IOException | RuntimeException e) {
                return null; // no doorbell (another version, another uid, not yet published): the peer's bound holds
            }
        }

        boolean found() {
            return flag != null;
        }
    }

    /** The process's one socket for rings to other processes. */
    private static final class Sender {
        private static DatagramChannel channel;
        private static final ByteBuffer ONE = ByteBuffer.allocateDirect(1);

        static synchronized void send(InetSocketAddress to) {
            try {
                if (channel == null) {
                    channel = DatagramChannel.open(StandardProtocolFamily.INET);
                    channel.configureBlocking(false);
                }
                ONE.clear();
                channel.send(ONE, to);
            } catch (IOException | RuntimeException e) {
                LOG.log(Level.DEBUG, "aeron doorbell: ring to " + to + " failed (" + e + ")");
            }
        }
    }
}
