package dev.kvtransfer.ucx;

import java.io.IOException;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;

/**
 * Which host (and IPC namespace) this process runs on, as 16 bytes peers can compare: shared memory reaches a
 * peer only when both agree. Derived from the kernel's boot id, the IPC namespace and the host name; none of them
 * is secret. Also finds the network device that holds an address (UCX's {@code NET_DEVICES} name for it).
 */
final class HostIdentity {
    private static final byte[] ID = compute();

    private HostIdentity() {
    }

    static byte[] id() {
        return ID.clone();
    }

    private static byte[] compute() {
        StringBuilder b = new StringBuilder();
        b.append(read(Path.of("/proc/sys/kernel/random/boot_id"))).append('|');
        try {
            b.append(Files.readSymbolicLink(Path.of("/proc/self/ns/ipc"))).append('|');
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            b.append("no-ipc-ns|");
        }
        try {
            b.append(InetAddress.getLocalHost().getHostName());
        } catch (IOException e) {
            b.append("no-hostname");
        }
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(b.toString().getBytes(StandardCharsets.UTF_8));
            return Arrays.copyOf(d, 16);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String read(Path p) {
        try {
            return Files.readString(p).trim();
        } catch (IOException | SecurityException e) {
            return "no-boot-id";
        }
    }

    /**
     * @param address a local address
     * @return the name of the network device holding it (e.g. {@code lo}, {@code eth0}), or null for a wildcard
     *         or unknown address
     */
    static String deviceOf(InetAddress address) {
        if (address.isAnyLocalAddress()) {
            return null;
        }
        try {
            NetworkInterface ni = NetworkInterface.getByInetAddress(address);
            if (ni == null && address.isLoopbackAddress()) {
                ni = NetworkInterface.getByName("lo");
            }
            return ni == null ? null : ni.getName();
        } catch (SocketException e) {
            return null;
        }
    }
}
