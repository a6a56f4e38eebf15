package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The media driver's shared memory (cnc.dat, the loss report, every log buffer, also
 * those created after start) cannot be opened by another local uid. The attacker is a real child process running
 * as uid {@code nobody} ({@code setpriv}); it tries to read every file and list every directory under the driver's
 * protecting parent, and the test counts the bytes it got (0). With {@code aeron.dirGroup} the named group's
 * members can open them and other uids still cannot.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AeronSharedMemoryModeTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final int NOBODY = 65534;
    /** A uid and gid with no account and no group of ours: "any other local user". */
    private static final int STRANGER = 4242;
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @BeforeAll
    static void needsRootAndSetpriv() {
        assumeTrue("root".equals(System.getProperty("user.name")),
                "only root can run a child as another uid; this test runs as " + System.getProperty("user.name"));
        assumeTrue(new File("/usr/bin/setpriv").canExecute(), "setpriv (util-linux) is not installed");
    }

    @AfterEach
    void stop() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
    }

    private AeronConnectionManager manager(String name, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(T);
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
        closeables.add(m);
        return m;
    }

    /** Moves verified bytes a → b over the manager pair's channel, so log buffers exist on both sides. */
    private void traffic(AeronConnectionManager a, AeronConnectionManager b, int tag, long seed) throws Exception {
        try (OffHeapBuffer buf = OffHeapBuffer.allocate(1 << 20)) {
            TestPattern.fill(buf, 0, 70_000, seed);
            Thread t = new Thread(() -> a.connection(b.localAddress()).send(tag, buf, 0, 70_000, T));
            t.start();
            b.recvConnect(tag, buf, 100_000, 70_000, T);
            t.join(T.toMillis());
            TestPattern.assertPattern(buf, 100_000, 70_000, seed);
        }
    }

    /** Result of one attempt by another uid: exit status and how many bytes it got out. */
    private record Attempt(Path path, int exit, long bytes, String stderr) {
    }

    /** Reads a file (or lists a directory) as uid/gid in a child process. */
    private static Attempt as(int uid, int gid, Path p) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of("/usr/bin/setpriv", "--reuid=" + uid, "--regid=" + gid,
                "--clear-groups"));
        if (Files.isDirectory(p)) {
            cmd.addAll(List.of("ls", "-a", p.toString()));
        } else {
            cmd.addAll(List.of("head", "-c", "1048576", p.toString()));
        }
        Process pr = new ProcessBuilder(cmd).start();
        pr.getOutputStream().close();
        byte[] out = pr.getInputStream().readAllBytes();
        String err = new String(pr.getErrorStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (!pr.waitFor(20, TimeUnit.SECONDS)) {
            pr.destroyForcibly();
            throw new AssertionError("the child reading " + p + " did not end within 20 s");
        }
        return new Attempt(p, pr.exitValue(), out.length, err);
    }

    private static List<Path> everything(Path parent) throws IOException {
        try (Stream<Path> s = Files.walk(parent)) {
            return s.collect(Collectors.toList());
        }
    }

    private static List<Path> logBuffers(List<Path> all) {
        return all.stream().filter(p -> p.toString().endsWith(".logbuffer")).collect(Collectors.toList());
    }

    /** Every path under the parent, tried by a uid that must get nothing. */
    private static long bytesLeakedTo(int uid, int gid, List<Path> all) throws Exception {
        long leaked = 0;
        for (Path p : all) {
            Attempt a = as(uid, gid, p);
            assertThat(a.exit()).as("uid %d opening %s (%s)", uid, p, a.stderr()).isNotZero();
            assertThat(a.stderr()).as("%s", p).contains("Permission denied");
            leaked += a.bytes();
        }
        return leaked;
    }

    private static String mode(Path p) throws IOException {
        return PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
    }

    /**
     * The one-copy path's files: a KV pool region in {@code /dev/shm} and the owner's fence file, both created
     * {@code 0600} in one step (no window with the umask's mode); uid nobody reads 0 bytes of either, while a writer
     * with the secret copies into the pool (bytes verified).
     */
    @Test
    void anotherUidCannotOpenTheSharedPoolOrFenceFiles() throws Exception {
        byte[] secret = "kvtransfer-shm-mode-secret-0123456789".getBytes(StandardCharsets.UTF_8);
        AeronConnectionManager owner = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig
                .builder().name("owner").defaultTimeout(T).authSecret(secret).build());
        closeables.add(owner);
        AeronConnectionManager writer = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig
                .builder().name("writer").defaultTimeout(T).authSecret(secret).build());
        closeables.add(writer);
        dev.kvtransfer.core.memory.HostBufferManager pools = new dev.kvtransfer.core.memory.HostBufferManager(false,
                true);
        closeables.add(pools);
        dev.kvtransfer.api.memory.MemoryBuffer pool = pools.allocatePool(1 << 20,
                dev.kvtransfer.api.memory.MemoryKind.HOST);
        closeables.add(pool);
        OffHeapBuffer src = OffHeapBuffer.allocate(1 << 20);
        closeables.add(src);
        TestPattern.fill(src, 0, 1 << 20, 21);
        dev.kvtransfer.api.transport.RegisteredRegion region = owner.register(pool, java.util.Set.of(
                writer.localAddress()));
        closeables.add(region);
        writer.connection(owner.localAddress()).write(new dev.kvtransfer.api.transport.WriteBatch().add(src, 0,
                region.descriptor(), 0, 1 << 20), T);
        TestPattern.assertPattern(pool, 0, 1 << 20, 21);
        Path file = Path.of(dev.kvtransfer.api.memory.SharedMappings.find(pool.address(), pool.size()).file());
        List<Path> all = new ArrayList<>(List.of(file));
        try (Stream<Path> s = Files.list(Path.of("/dev/shm"))) {
            s.filter(p -> p.getFileName().toString().startsWith(ShmFence.PREFIX + ProcessHandle.current().pid() + "-"))
                    .forEach(all::add);
        }
        assertThat(all).hasSizeGreaterThanOrEqualTo(2);
        for (Path p : all) {
            assertThat(mode(p)).as("%s", p).isEqualTo("rw-------");
        }
        long leaked = bytesLeakedTo(NOBODY, NOBODY, all);
        System.out.println("one-copy files: uid nobody tried " + all.size() + " files, bytes read: " + leaked);
        assertThat(leaked).isZero();
    }

    @Test
    void anotherUidCannotOpenTheEmbeddedDriversFilesNotEvenThoseCreatedLater() throws Exception {
        AeronConnectionManager a = manager("a");
        AeronConnectionManager b = manager("b");
        AeronConnectionManager u = manager("u", AeronSettings.IPC, "false");
        traffic(a, b, 1, 11); // IPC log buffers
        Path driver = Path.of(a.driverDirectory());
        Path parent = driver.getParent();
        assertThat(parent.getFileName().toString()).startsWith(EmbeddedDriver.PREFIX);
        assertThat(mode(parent)).isEqualTo("rwx------");
        assertThat(mode(driver)).isEqualTo("rwx------");
        assertThat(mode(driver.resolve("cnc.dat"))).isEqualTo("rw-------");
        int before = logBuffers(everything(parent)).size();
        // Streams opened after the driver started: new log buffers, created with the JVM's umask (0644 here)...
        traffic(u, a, 2, 12);
        traffic(b, u, 3, 13);
        List<Path> all = everything(parent);
        assertThat(logBuffers(all).size()).as("log buffers created after start").isGreaterThan(before);
        assertThat(all).anySatisfy(p -> assertThat(p.getFileName().toString()).isEqualTo("cnc.dat"));
        // ...and still none of them opens for another uid: the parent (0700) is not searchable.
        long leaked = bytesLeakedTo(NOBODY, NOBODY, all);
        System.out.println("embedded driver: uid nobody tried " + all.size() + " paths (" + logBuffers(all).size()
                + " log buffers), bytes read: " + leaked);
        assertThat(leaked).isZero();
    }

    @Test
    void anotherUidCannotOpenTheSharedDriversFilesAndTheyAreOwnerOnly() throws Exception {
        HostSupport host = new AeronTransportProvider().startHostSupport(TransportConfig.builder().build());
        closeables.add(host);
        String dir = host.properties().get(AeronSettings.DIR);
        AeronConnectionManager a = manager("a", AeronSettings.DIR, dir);
        AeronConnectionManager b = manager("b", AeronSettings.DIR, dir);
        traffic(a, b, 4, 14);
        Path parent = Path.of(dir).getParent();
        List<Path> all = everything(parent);
        assertThat(logBuffers(all)).isNotEmpty();
        assertThat(mode(parent)).isEqualTo("rwx------");
        // The shared driver runs under umask 077: what it creates, later too, is owner-only as well.
        for (Path p : all) {
            assertThat(mode(p)).as("%s", p).isEqualTo(Files.isDirectory(p) ? "rwx------" : "rw-------");
        }
        long leaked = bytesLeakedTo(NOBODY, NOBODY, all);
        System.out.println("shared driver: uid nobody tried " + all.size() + " paths, bytes read: " + leaked);
        assertThat(leaked).isZero();
        host.close();
        assertThat(parent).doesNotExist();
    }

    @Test
    void withADeploymentGroupItsMembersMayUseTheSharedDriverAndNobodyElse() throws Exception {
        // nogroup (65534) stands for the deployment group; uid nobody is its member, STRANGER is not.
        HostSupport host = new AeronTransportProvider().startHostSupport(TransportConfig.builder()
                .property(AeronSettings.DIR_GROUP, "nogroup").build());
        closeables.add(host);
        String dir = host.properties().get(AeronSettings.DIR);
        AeronConnectionManager a = manager("a", AeronSettings.DIR, dir);
        AeronConnectionManager b = manager("b", AeronSettings.DIR, dir);
        traffic(a, b, 5, 15);
        Path parent = Path.of(dir).getParent();
        List<Path> all = everything(parent);
        Path cnc = Path.of(dir, "cnc.dat");
        assertThat(Files.getAttribute(cnc, "unix:gid")).isEqualTo(NOBODY);
        assertThat(mode(cnc)).isEqualTo("rw-rw----");
        for (Path p : logBuffers(all)) {
            assertThat(mode(p)).as("%s", p).isEqualTo("rw-rw----");
            assertThat(Files.getAttribute(p, "unix:gid")).as("%s", p).isEqualTo(NOBODY);
        }
        // The doorbells the group's processes ring (Doorbell): group read-write, the group's like the driver's files.
        List<Path> bells = all.stream().filter(p -> p.getFileName().toString().startsWith(Doorbell.FILE_PREFIX))
                .toList();
        assertThat(bells).as("a doorbell per manager").hasSize(2);
        for (Path p : bells) {
            assertThat(mode(p)).as("%s", p).isEqualTo("rw-rw----");
            assertThat(Files.getAttribute(p, "unix:gid")).as("%s", p).isEqualTo(NOBODY);
        }
        Attempt member = as(NOBODY, NOBODY, cnc);
        assertThat(member.exit()).as("a member of the group reads cnc.dat: %s", member.stderr()).isZero();
        assertThat(member.bytes()).isPositive();
        long leaked = bytesLeakedTo(STRANGER, STRANGER, all);
        System.out.println("shared driver, group nogroup: a member read " + member.bytes() + " B of cnc.dat; uid "
                + STRANGER + " tried " + all.size() + " paths, bytes read: " + leaked);
        assertThat(leaked).isZero();
    }
}
