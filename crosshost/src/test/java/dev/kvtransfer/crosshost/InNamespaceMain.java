package dev.kvtransfer.crosshost;

import java.net.NetworkInterface;
import java.util.Collections;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;

/**
 * Helper processes of {@link NetnsPairTest}:
 * <ul>
 *   <li>{@code hang}: prints {@code STARTED <interfaces it sees, sorted>} and then never answers (a hung peer);
 *       it halts when its stdin ends;</li>
 *   <li>{@code exit-without-close}: creates a {@link NetnsPair}, prints {@code CREATED <ns a> <ns b>} and exits
 *       without closing it: only the pair's shutdown hook can remove the namespaces.</li>
 * </ul>
 */
public final class InNamespaceMain {
    private InNamespaceMain() {
    }

    /**
     * Entry point.
     *
     * @param args {@code hang} or {@code exit-without-close}
     * @throws Exception on any failure (exit code 1)
     */
    public static void main(String[] args) throws Exception {
        if (args[0].equals("hang")) {
            String names = Collections.list(NetworkInterface.getNetworkInterfaces()).stream()
                    .map(NetworkInterface::getName).sorted().collect(Collectors.joining(","));
            System.out.println("STARTED " + names);
            System.out.flush();
            Thread watcher = new Thread(() -> {
                try {
                    while (System.in.read() >= 0) {
                        // ignore whatever comes: a hung peer answers nothing
                    }
                } catch (java.io.IOException e) {
                    // stdin gone: same as its end
                }
                Runtime.getRuntime().halt(3);
            }, "stdin-watch");
            watcher.setDaemon(true);
            watcher.start();
            new CountDownLatch(1).await();
        } else if (args[0].equals("exit-without-close")) {
            NetnsPair p = NetnsPair.create();
            System.out.println("CREATED " + p.a().namespace() + " " + p.b().namespace());
            System.out.flush();
            System.exit(0);
        } else {
            throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }
}
