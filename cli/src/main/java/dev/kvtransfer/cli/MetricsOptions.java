package dev.kvtransfer.cli;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import picocli.CommandLine;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.io.PrintStream;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;

/**
 * The {@code --metrics-port P} option of every long-running command (a picocli mixin): with {@code P > 0} the
 * command serves its meters in the Prometheus text format at {@code http://127.0.0.1:P/metrics} while it runs
 * ({@link MetricsEndpoint}); {@code 0} (the default) serves nothing.
 *
 * <p>Use: {@code @Mixin MetricsOptions metrics = new MetricsOptions();}, then
 * {@code try (MetricsOptions.Scope m = metrics.start(out)) { ... builder.meters(m.registry("ctx")) ... }}.
 */
public final class MetricsOptions {
    @Spec(Spec.Target.MIXEE)
    CommandSpec mixee;

    private int port;

    /**
     * @param p the port, 0 (off) or 1..65535
     * @throws CommandLine.ParameterException naming the option when outside that range
     */
    @Option(names = "--metrics-port", paramLabel = "P", description = "serve Prometheus metrics at "
            + "http://127.0.0.1:P/metrics (loopback only) while the command runs (default 0: off)")
    void setPort(int p) {
        if (p < 0 || p > 65535) {
            throw new CommandLine.ParameterException(mixee.commandLine(), "--metrics-port " + p
                    + ": must be 0 (off) or a TCP port 1..65535");
        }
        this.port = p;
    }

    @Option(names = "--metrics-listen", paramLabel = "HOST", description = "address the metrics endpoint binds "
            + "(default 127.0.0.1: loopback only; name an interface address for a scraper on another machine)")
    String listen = "127.0.0.1";

    /** @return the port given, 0 when off */
    public int port() {
        return port;
    }

    /** @return whether metrics are served */
    public boolean enabled() {
        return port > 0;
    }

    /**
     * Starts the endpoint when the option asks for one and prints where it is.
     *
     * @param out where the {@code metrics} line goes (nothing is printed when off)
     * @return the scope: its registries, closed with the command
     * @throws java.io.UncheckedIOException naming the address when the port cannot be bound
     */
    public Scope start(PrintStream out) {
        Objects.requireNonNull(out, "out");
        if (!enabled()) {
            return new Scope(null);
        }
        MetricsEndpoint endpoint;
        if ("127.0.0.1".equals(listen)) {
            endpoint = MetricsEndpoint.start(port);
        } else {
            java.net.InetAddress host;
            try {
                host = java.net.InetAddress.getByName(listen);
            } catch (java.net.UnknownHostException e) {
                throw new IllegalArgumentException("--metrics-listen " + listen + ": unknown host");
            }
            endpoint = MetricsEndpoint.start(host, port);
        }
        out.printf(Locale.ROOT, "%-18s %s%n", "metrics", endpoint.uri());
        return new Scope(endpoint);
    }

    /** The metrics of one command run: the endpoint when one is served, and a registry per instance. */
    public static final class Scope implements AutoCloseable {
        private final MetricsEndpoint endpoint;

        private Scope(MetricsEndpoint endpoint) {
            this.endpoint = endpoint;
        }

        /** @return the endpoint, when {@code --metrics-port} asked for one */
        public Optional<MetricsEndpoint> endpoint() {
            return Optional.ofNullable(endpoint);
        }

        /**
         * The registry for one instance's ranks: served (with the tag {@code instance=<name>}) when the endpoint
         * runs, else a private {@link SimpleMeterRegistry} (what {@code LocalInstance} uses by default).
         *
         * @param instance the instance's name
         * @return the registry
         */
        public MeterRegistry registry(String instance) {
            Objects.requireNonNull(instance, "instance");
            return endpoint != null ? endpoint.instanceRegistry(instance) : new SimpleMeterRegistry();
        }

        /** Stops the endpoint, if any. */
        @Override
        public void close() {
            if (endpoint != null) {
                endpoint.close();
            }
        }
    }
}
