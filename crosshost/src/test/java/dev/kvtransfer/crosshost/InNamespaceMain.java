package dev.kvtransfer.crosshost;

import java.net.NetworkInterface;
import java.util.Collections;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;

/**
 * Small helper processes of the namespace tests:
 * <ul>
 *   <li>{@code hang}: prints {@code STARTED <interfaces it sees, sorted>} and then never answers (a hung peer);
 *       it halts when its stdin ends;</li>
 *   <li>{@code exit-without-close}: creates a {@link NetnsPair}, prints {@code CREATED <ns a> <ns b>} and exits
 *       without closing it: only the pair's shutdown hook can remove the namespaces;</li>
 *   <li>{@code create-and-hang}: creates a {@link NetnsPair}, prints {@code CREATED <ns a> <ns b>} and waits to be
 *       killed (a test run killed with SIGKILL: no shutdown hook runs, the namespaces stay);</li>
 *   <li>{@code star-and-hang}: creates a one-spoke {@link NetnsStar}, starts {@code sleep 600} inside the spoke,
 *       prints {@code CREATED <hub> <spoke> <sleep pid>} and waits to be killed (the sleep outlives it);</li>
 *   <li>{@code probe}: prints {@code AVAILABLE} or {@code UNAVAILABLE <why>} ({@link NetnsPair#unavailabilityCause()}:
 *       the reason the namespace tests give when they skip).</li>
 * </ul>
 */
public final class InNamespaceMain {
    private InNamespaceMain() {
    }

    /**
     * Entry point.
     *
     * @param args the mode and its arguments (see the class comment)
     * @throws Exception on any failure (exit code 1)
     */
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "hang" -> {
                String names = Collections.list(NetworkInterface.getNetworkInterfaces()).stream()
                        .map(NetworkInterface::getName).sorted().collect(Collectors.joining(","));
                System.out.println("STARTED " + names);
                System.out.flush();
                dev.kvtransfer.testkit.process.ChildJvm.haltWhenStdinEnds();
                new CountDownLatch(1).await();
            }
            case "exit-without-close" -> {
                NetnsPair p = NetnsPair.create();
                System.out.println("CREATED " + p.a().namespace() + " " + p.b().namespace());
                System.out.flush();
                System.exit(0);
            }
            case "create-and-hang" -> {
                NetnsPair p = NetnsPair.create();
                System.out.println("CREATED " + p.a().namespace() + " " + p.b().namespace());
                System.out.flush();
                dev.kvtransfer.testkit.process.ChildJvm.haltWhenStdinEnds();
                new CountDownLatch(1).await(); // until killed: SIGKILL runs no shutdown hook
            }
            case "star-and-hang" -> {
                NetnsStar s = NetnsStar.create(1);
                // A process inside a spoke that outlives this JVM (no parent-death signal): what a killed test
                // run leaves behind.
                Process sleeper = new ProcessBuilder("ip", "netns", "exec", s.spoke(0).namespace(), "sleep", "600")
                        .redirectOutput(ProcessBuilder.Redirect.DISCARD).redirectErrorStream(true).start();
                System.out.println("CREATED " + s.hub().namespace() + " " + s.spoke(0).namespace() + " "
                        + sleeper.pid());
                System.out.flush();
                dev.kvtransfer.testkit.process.ChildJvm.haltWhenStdinEnds();
                new CountDownLatch(1).await(); // until killed
            }
            case "probe" -> {
                String cause = NetnsPair.unavailabilityCause();
                System.out.println(cause == null ? "AVAILABLE" : "UNAVAILABLE " + cause);
                System.out.flush();
            }
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }
}
