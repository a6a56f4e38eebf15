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
 * directory on the way out. Peers on it talk {@code aeron:ipc}.
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
        File dir = EmbeddedDriver.newDirectory("host");
        MediaDriver driver = MediaDriver.launch(EmbeddedDriver.context(s, dir));
        Runtime.getRuntime().addShutdownHook(new Thread(driver::close, "shared-driver-shutdown"));
        System.out.println("READY " + dir.getAbsolutePath());
        System.out.flush();
        while (System.in.read() >= 0) {
            // the parent keeps our stdin open while the host needs the driver
        }
        driver.close();
        System.exit(0);
    }
}
