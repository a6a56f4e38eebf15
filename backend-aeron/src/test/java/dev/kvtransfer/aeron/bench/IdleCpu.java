package dev.kvtransfer.aeron.bench;

import dev.kvtransfer.aeron.AeronTransportProvider;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Idle CPU of N managers in one JVM (bench scope, not a test): process CPU time over a window after they
 * connected to each other, as a share of one core. Arguments: {@code [managers=2] [seconds=5] [key=value ...]}.
 */
public final class IdleCpu {
    private IdleCpu() {
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int seconds = args.length > 1 ? Integer.parseInt(args[1]) : 5;
        TransportConfig.Builder b = TransportConfig.builder();
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            b.property(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        AeronTransportProvider p = new AeronTransportProvider();
        List<ConnectionManager> ms = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ms.add(p.create(b.name("idle-" + i).build()));
        }
        for (ConnectionManager a : ms) {
            for (ConnectionManager c : ms) {
                if (a != c) {
                    a.connection(c.localAddress());
                }
            }
        }
        TimeUnit.SECONDS.sleep(2); // let the connections settle
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        TimeUnit.SECONDS.sleep(seconds);
        long cpu = os.getProcessCpuTime() - cpu0;
        long wall = System.nanoTime() - t0;
        System.out.printf("%d idle managers, %s: %.1f %% of one core (threads: %d)%n", n,
                String.join(" ", java.util.Arrays.copyOfRange(args, Math.min(2, args.length), args.length)),
                100.0 * cpu / wall, Thread.activeCount());
        for (ConnectionManager m : ms) {
            m.close();
        }
    }
}
