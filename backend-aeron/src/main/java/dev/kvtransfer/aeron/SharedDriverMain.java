package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import io.aeron.driver.MediaDriver;

import java.io.File;
import java.io.IOException;

/**
 * The standalone media driver one host's processes share ({@link AeronHostSupport} starts it): Aeron's
 * {@link MediaDriver} with this transport's driver settings (the {@code aeron.*} properties given as
 * {@code key=value} arguments), in a fresh directory. Prints {@code READY <directory>} once clients may connect,
 * then runs until its standard input ends (its parent closed it, or died) or it is terminated, and deletes the
 * directory on the way out. Peers on it talk {@code aeron:ipc}. Its directory and files are owner-only, or open to
 * the group {@code aeron.dirGroup} names ({@link EmbeddedDriver#newDirectory}; {@link AeronHostSupport} starts it
 * under the matching umask).
 */
public final class SharedDriverMain {
    private SharedDriverMain() {
    }

    /**
     * Runs the driver.
     *
     * @param args {@code aeron.*=value} driver properties
     * @throws IOException never in practice (stdin)
     */
    public static void main(String[] args) throws IOException {
        TransportConfig.Builder b = TransportConfig.builder().name("shared-driver");
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("argument '" + a + "': expected aeron.key=value");
            }
            b.property(a.substring(0, eq), a.substring(eq + 1));
        }
        AeronSettings s = AeronSettings.from(b.build());
        File dir = EmbeddedDriver.newDirectory("host", s.dirGroup);
        MediaDriver driver;
        try {
            driver = MediaDriver.launch(EmbeddedDriver.context(s, dir));
        } catch (RuntimeException | Error e) {
            EmbeddedDriver.deleteDirectory(dir);
            throw e;
        }
        EmbeddedDriver.tighten(dir, s.dirGroup);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            driver.close();
            EmbeddedDriver.deleteDirectory(dir);
        }, "shared-driver-shutdown"));
        System.out.println("READY " + dir.getAbsolutePath());
        System.out.flush();
        while (System.in.read() >= 0) {
            // the parent keeps our stdin open while the host needs the driver
        }
        System.exit(0); // the shutdown hook closes the driver and deletes its directory
    }
}
