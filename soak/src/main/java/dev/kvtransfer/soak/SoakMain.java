package dev.kvtransfer.soak;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.Callable;

/**
 * {@code soak}: runs the soak ({@link Soak}) and prints where its report is. Exit code 0 when the run had no
 * hang, no verification failure and no failure without an ErrorCode naming its request; 1 otherwise; 2 on a bad
 * command line.
 */
@Command(name = "soak", mixinStandardHelpOptions = true,
        description = "A soak across processes with mixed faults (loss, delay, stall, kill, cancel storms).")
public final class SoakMain implements Callable<Integer> {
    @Option(names = "--backend", defaultValue = "aeron",
            description = "transport: aeron or ucx (default ${DEFAULT-VALUE})")
    String backend;
    @Option(names = "--duration", defaultValue = "30m", converter = DurationConverter.class,
            description = "how long requests are issued, e.g. 30m, 180s (default ${DEFAULT-VALUE})")
    Duration duration;
    @Option(names = "--phase", defaultValue = "20s", converter = DurationConverter.class,
            description = "length of each fault phase (default ${DEFAULT-VALUE})")
    Duration phase;
    @Option(names = "--inflight", defaultValue = "8", description = "requests in flight (default ${DEFAULT-VALUE})")
    int inflight;
    @Option(names = "--seed", defaultValue = "1", description = "seed (default ${DEFAULT-VALUE})")
    long seed;
    @Option(names = "--out", defaultValue = "target/soak", description = "report directory (default ${DEFAULT-VALUE})")
    Path out;
    @Option(names = "--request-timeout", defaultValue = "5s", converter = DurationConverter.class,
            description = "each request's deadline (default ${DEFAULT-VALUE})")
    Duration requestTimeout;
    @Option(names = "--hang-grace", defaultValue = "10s", converter = DurationConverter.class,
            description = "past its deadline, when an unended request counts as a hang (default ${DEFAULT-VALUE})")
    Duration hangGrace;
    @Option(names = "--max-blocks", defaultValue = "24",
            description = "most blocks (256 KiB each) of one request (default ${DEFAULT-VALUE})")
    int maxBlocks;
    @Option(names = "--child-jvm-flag", description = "an extra flag of every child JVM (repeatable)")
    java.util.List<String> childJvmFlags = new java.util.ArrayList<>();

    /**
     * Entry point.
     *
     * @param args see {@code --help}
     */
    public static void main(String[] args) {
        System.exit(new CommandLine(new SoakMain()).execute(args));
    }

    @Override
    public Integer call() throws Exception {
        SoakOptions o = new SoakOptions(backend, duration, phase, inflight, seed, out.toAbsolutePath(), requestTimeout,
                hangGrace, maxBlocks, childJvmFlags);
        SoakReport r = Soak.run(o);
        System.out.println(r.markdown());
        System.out.println("report: " + o.out().resolve("report.md") + " and report.json");
        boolean clean = r.hangs().isEmpty() && r.verificationFailures().isEmpty() && r.unnamed().isEmpty();
        return clean ? 0 : 1;
    }

    /** {@code 30m}, {@code 180s}, {@code 1500ms}, {@code 2h}, or an ISO-8601 duration. */
    static final class DurationConverter implements CommandLine.ITypeConverter<Duration> {
        @Override
        public Duration convert(String v) {
            String s = v.trim().toLowerCase(java.util.Locale.ROOT);
            if (s.endsWith("ms")) {
                return Duration.ofMillis(Long.parseLong(s.substring(0, s.length() - 2)));
            }
            long n = s.length() > 1 ? Long.parseLong(s.substring(0, s.length() - 1)) : -1;
            return switch (s.charAt(s.length() - 1)) {
                case 's' -> Duration.ofSeconds(n);
                case 'm' -> Duration.ofMinutes(n);
                case 'h' -> Duration.ofHours(n);
                default -> Duration.parse(v);
            };
        }
    }
}
