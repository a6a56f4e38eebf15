package dev.kvtransfer.cli;

import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.RankLauncher;
import dev.kvtransfer.api.transport.TransportProvider;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * What the cli needs of a plugin beyond the api, reached through the plugin's own class loader, so the cli runs
 * the same whether the plugin is on its class path (tests, the shaded jar) or in a plugin directory (the
 * distribution, where the cli cannot link against plugin classes).
 *
 * <ul>
 *   <li>{@link #rankLauncher}: the transport's {@link TransportProvider#launcher()}; for an MPI plugin that does
 *       not offer one yet, an adapter over its {@code MpiLauncher}, {@code MpiRuntime} and {@code MpiGroupComm}
 *       (the same classes the plugin's connection manager uses: one MPI runtime per process).</li>
 * </ul>
 */
public final class PluginBridge {
    private PluginBridge() {
    }

    /**
     * The launcher of a transport whose ranks its own launcher starts.
     *
     * @param provider the transport
     * @return its launcher
     * @throws IllegalArgumentException when it has none
     */
    public static RankLauncher rankLauncher(TransportProvider provider) {
        Objects.requireNonNull(provider, "provider");
        return provider.launcher().orElseGet(() -> {
            if (provider.name().equals("mpi")) {
                return new ReflectiveMpiLauncher(provider.getClass().getClassLoader());
            }
            throw new IllegalArgumentException("transport '" + provider.name() + "' has no rank launcher: its ranks "
                    + "are started any way (threads, child JVMs)");
        });
    }

    private static Object invoke(Method m, Object target, Object... args) throws IllegalAccessException {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            Throwable c = e.getCause();
            if (c instanceof RuntimeException r) {
                throw r;
            }
            if (c instanceof Error err) {
                throw err;
            }
            throw new IllegalStateException(c);
        }
    }

    /** {@link RankLauncher} over backend-mpi's own classes, loaded from the plugin's loader. */
    private static final class ReflectiveMpiLauncher implements RankLauncher {
        private final Class<?> launcher;
        private final Class<?> runtime;
        private final Class<?> groupComm;

        ReflectiveMpiLauncher(ClassLoader loader) {
            try {
                launcher = Class.forName("dev.kvtransfer.mpi.MpiLauncher", false, loader);
                runtime = Class.forName("dev.kvtransfer.mpi.MpiRuntime", false, loader);
                groupComm = Class.forName("dev.kvtransfer.mpi.MpiGroupComm", false, loader);
            } catch (ClassNotFoundException e) {
                throw new IllegalStateException("the mpi plugin offers no launcher() and lacks " + e.getMessage(), e);
            }
        }

        @Override
        @SuppressWarnings("unchecked")
        public List<String> command(int processes, List<String> command) {
            try {
                Object b = invoke(launcher.getMethod("builder"), null);
                b = invoke(launcher.getMethod("np", int.class), b, processes);
                List<String> cmd = new ArrayList<>((List<String>) invoke(launcher.getMethod("mpirunPrefix"), b));
                cmd.addAll(command);
                return cmd;
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("MpiLauncher: " + e, e);
            }
        }

        private Object mpi() throws ReflectiveOperationException {
            return invoke(runtime.getMethod("get"), null);
        }

        @Override
        public int launchedRank() {
            try {
                return (int) invoke(runtime.getMethod("worldRank"), mpi());
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("MpiRuntime: " + e, e);
            }
        }

        @Override
        public int launchedSize() {
            try {
                return (int) invoke(runtime.getMethod("worldSize"), mpi());
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("MpiRuntime: " + e, e);
            }
        }

        @Override
        public GroupComm group(int color, int key, Duration timeout) {
            try {
                return (GroupComm) invoke(groupComm.getMethod("split", int.class, int.class, Duration.class), null,
                        color, key, timeout);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("MpiGroupComm: " + e, e);
            }
        }
    }
}
