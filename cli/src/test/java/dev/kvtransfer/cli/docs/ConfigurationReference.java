package dev.kvtransfer.cli.docs;

import dev.kvtransfer.api.ConfigKey;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.aeron.AeronSettings;
import dev.kvtransfer.cli.CliErrors;
import dev.kvtransfer.cli.Progress;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransceiverConfigKeys;
import dev.kvtransfer.core.TrtllmEnvironment;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.memory.cuda.CudaMemoryProvider;
import dev.kvtransfer.mpi.MpiLauncher;
import dev.kvtransfer.mpi.MpiTransportProvider;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.RuleBounds;
import dev.kvtransfer.ucx.UcxSettings;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Renders {@code docs/configuration.md} from the settings classes: their {@code CONFIG_KEYS} tables where they have
 * one, and the tables below for the classes that have none yet ({@code AeronSettings}, whose key set
 * {@code ConfigurationDocTest} checks against {@link AeronSettings#KNOWN}) and for the JVM system properties, which
 * are read where they are used. It lives in the cli's test scope because the cli is the one module that sees core,
 * every transport, the memory plugin and the testkit at once.
 */
public final class ConfigurationReference {
    /** The page, relative to the repository root. */
    public static final String PAGE = "docs/configuration.md";
    /** The command that rewrites the page, printed when it is stale. */
    public static final String REGENERATE = "mvn -q -o -pl cli -am test -Dtest=ConfigurationDocTest"
            + " -Dsurefire.failIfNoSpecifiedTests=false -Dkvtransfer.docs.regenerate=true";

    /** {@code AeronSettings} keeps its defaults package-private and has no table: its rows, checked by the test. */
    static final List<ConfigKey> AERON = List.of(
            new ConfigKey(AeronSettings.DIR, "", "empty, or a directory",
                    "Directory of an external, already running media driver (for example the host's shared one); "
                            + "then none is embedded."),
            new ConfigKey(AeronSettings.IDLE, "backoff", "backoff | agrona-backoff | sleeping | yielding | busyspin",
                    "Idle strategy of the transport's agents and of the embedded driver."),
            new ConfigKey(AeronSettings.THREADING, "shared", "shared | shared_network | dedicated",
                    "Threading mode of the embedded media driver."),
            new ConfigKey(AeronSettings.TERM_LENGTH, Long.toString(16L << 20),
                    "a power of two in [1048576, 1073741824]", "Term buffer length of each publication."),
            new ConfigKey(AeronSettings.MTU, "32768", "a multiple of 32 in [1408, 65504]", "UDP datagram size."),
            new ConfigKey(AeronSettings.CHUNK, Long.toString(1L << 20),
                    "[1024, largest message of the term length less the header]",
                    "Bytes per data chunk of a rendezvous message (one Aeron message each)."),
            new ConfigKey(AeronSettings.SOCKET_BUFFER, Long.toString(4L << 20), "[65536, 1073741824] bytes",
                    "Socket buffers, clamped to the OS maximum and to half a term; the receiver window is half of it."),
            new ConfigKey(AeronSettings.PEER_TIMEOUT_MS, "3000", "[500, 600000] ms",
                    "Silence (no data, heartbeat or status message) after which a connected peer is lost."),
            new ConfigKey(AeronSettings.CONNECT_TIMEOUT_MS, "max(5000, peerTimeoutMs + 2000)", "[500, 600000] ms",
                    "How long a peer that was never reached may take to answer its first connection."),
            new ConfigKey(AeronSettings.CLIENT_TIMEOUT_MS, "10000", "[1000, 3600000] ms",
                    "Driver-client liveness: the client's driver timeout and, embedded, the driver's client timeout."),
            new ConfigKey(AeronSettings.EARLY_BUFFER_BYTES, Long.toString(64L << 20), "[0, 2^40] bytes",
                    "Bound on the bytes of messages held before their receive is posted (per manager)."),
            new ConfigKey(AeronSettings.EARLY_MESSAGES, "65536", "[16, 2^24]",
                    "Bound on the number of messages held before their receive is posted."),
            new ConfigKey(AeronSettings.EAGER_LIMIT, Long.toString(Connection.EAGER_LIMIT),
                    "[" + Connection.EAGER_LIMIT + ", min(largest message, 1048576)] bytes",
                    "Largest message sent eagerly, without rendezvous."),
            new ConfigKey(AeronSettings.IPC, "true", "true | false",
                    "Whether peers on the same media driver talk over aeron:ipc."),
            new ConfigKey(AeronSettings.AGENTS, "1", "[1, 64]",
                    "Agent threads per media driver in this process (all managers on that driver share them)."),
            new ConfigKey(AeronSettings.HANDSHAKE_TIMEOUT_MS, "5000", "[100, 600000] ms",
                    "A stream that has not completed its handshake in this time is refused."),
            new ConfigKey(AeronSettings.MAX_IMAGES, "4096", "[16, 1048576]",
                    "Bound on the streams a manager keeps state for; beyond it new streams are ignored."),
            new ConfigKey(AeronSettings.MAX_PENDING_HANDSHAKES, "min(1024, maxImages / 2)", "[8, maxImages]",
                    "Bound on the streams awaiting their hello; a new one beyond it evicts the oldest."),
            new ConfigKey(AeronSettings.MAX_PENDING_PER_SOURCE, "min(256, maxPendingHandshakes)",
                    "[1, maxPendingHandshakes]",
                    "Bound on the streams awaiting their hello from one source (ip:port)."),
            new ConfigKey(AeronSettings.AUTH_WINDOW_MS, "120000", "[1000, 86400000] ms",
                    "How far an authenticated hello's timestamp may be from the receiver's clock."),
            new ConfigKey(AeronSettings.SPIN_MICROS, "100", "[0, 100000] µs",
                    "How long an agent (and the embedded driver) keeps spinning after work before it parks."),
            new ConfigKey(AeronSettings.CALLER_SPIN_MICROS, "0", "[0, 100000] µs",
                    "How long a blocked caller spins before it parks; keep 0 on a small host."),
            new ConfigKey(AeronSettings.CALLER_POLL_MICROS, "100", "[0, 100000] µs",
                    "How long a blocked caller runs its manager's duty cycle itself before it parks (0 = never)."),
            new ConfigKey(AeronSettings.CONGESTION_CONTROL, "cubic", "cubic | static",
                    "Congestion control of the UDP streams this manager receives; IPC streams have none."),
            new ConfigKey(AeronSettings.DIR_GROUP, "", "empty, or a group name",
                    "Group that may use the host's shared media driver (group read-write); empty = owner only."),
            new ConfigKey(AeronSettings.SHARED_MEMORY_WRITES, "true", "true | false",
                    "One-sided writes to a peer process of this host copy straight into its shared pool file (one "
                            + "copy; needs a deployment secret), and a pull between local instances moves as such "
                            + "writes; false keeps writes emulated (two copies over IPC) and pulls two-sided."),
            new ConfigKey(AeronSettings.DOORBELL, "true", "true | false",
                    "An idle agent sleeps on a doorbell that peers of this host ring after they offer it a message, "
                            + "so a request after a quiet spell does not wait for the agent's park (up to 1 ms a "
                            + "hop); only with aeron.idle=backoff and aeron.ipc=true."));

    /** JVM system properties ({@code -Dname=value}), read where they are used. */
    static final List<ConfigKey> SYSTEM_PROPERTIES = List.of(
            new ConfigKey(Plugins.PLUGIN_DIRS_PROPERTY, "", "directories separated by ':'",
                    "Plugin directories to discover plugins in (the launcher sets it to the distribution's plugins/); "
                            + "unset = the class path only."),
            new ConfigKey("kvtransfer.home", "", "a directory",
                    "The distribution's root, set by bin/kvtransfer; `plugins` shows paths relative to it."),
            new ConfigKey(CliErrors.VERBOSE_PROPERTY, "false", "true | false",
                    "Print the stack trace of a failing command, as --verbose does."),
            new ConfigKey(Progress.LINE_INTERVAL_PROPERTY, Long.toString(Progress.DEFAULT_LINE_INTERVAL_MS), "ms",
                    "Time between two progress lines when the output is not a terminal."),
            new ConfigKey(HostBufferManager.DEBUG_PROPERTY, "false", "true | false",
                    "Capture allocation sites, so a leak report names where each outstanding buffer came from."),
            new ConfigKey(HostBufferManager.SHARED_POOLS_PROPERTY, "true", "true | false",
                    "Host KV pools live in owner-only /dev/shm files that an authenticated writer of this host can "
                            + "copy into once; false allocates them privately."),
            new ConfigKey("kvtransfer.standard.fusedChecksums", "true", "true | false",
                    "Standard formatter: compute part checksums in the gather / scatter pass (false: a separate pass, "
                            + "for comparisons)."),
            new ConfigKey("kvtransfer.pushTrace", "false", "true | false",
                    "Print one line per push / layer-wise step to standard error (read by scripts/push-trace.py)."),
            new ConfigKey(MpiLauncher.MPIRUN_PROPERTY, "mpirun on PATH", "a path",
                    "The mpirun binary (also the environment variable KVTRANSFER_MPIRUN)."),
            new ConfigKey("kvtransfer.mpi.library", "the library packaged in the jar", "a path",
                    "A libkvmpi.so to load instead of the packaged one."),
            new ConfigKey(LeakCheckExtension.BOUND_PROPERTY, Long.toString(LeakCheckExtension.BOUND.toMillis()),
                    "ms", "Testkit: how long threads and file descriptors get to go away after a test class."),
            new ConfigKey(RuleBounds.RULE_SECONDS_PROPERTY, "the rule's own bound", "seconds",
                    "Testkit: bound of each conformance rule (also a JUnit configuration parameter)."),
            new ConfigKey(RuleBounds.SUITE_SECONDS_PROPERTY, "the suite's own budget", "seconds",
                    "Testkit: the suite's budget once a rule has hung (also a JUnit configuration parameter)."));

    /** TensorRT-LLM's backend switches: {@code TrtllmEnvironment} keeps them private. */
    static final Map<String, String> TRTLLM_BACKENDS = Map.of(
            "TRTLLM_USE_UCX_KVCACHE", "`kvtransfer.backend` = ucx when 1",
            "TRTLLM_USE_MPI_KVCACHE", "`kvtransfer.backend` = mpi when 1");

    private ConfigurationReference() {
    }

    /** @return every documented key, section by section */
    public static List<ConfigKey> allKeys() {
        List<ConfigKey> all = new ArrayList<>(TransceiverConfigKeys.CONFIG_KEYS);
        all.addAll(AERON);
        all.addAll(UcxSettings.CONFIG_KEYS);
        all.addAll(MpiTransportProvider.CONFIG_KEYS);
        all.addAll(CudaMemoryProvider.CONFIG_KEYS);
        all.addAll(SYSTEM_PROPERTIES);
        return all;
    }

    /** @return the page as it should be */
    public static String render() {
        StringBuilder b = new StringBuilder();
        b.append("# Configuration reference\n\n");
        b.append("<!-- Generated by cli/src/test/java/dev/kvtransfer/cli/docs/ConfigurationReference.java; do not edit.\n");
        b.append("     Regenerate: ").append(REGENERATE).append(" -->\n\n");
        b.append("Every key kvtransfer reads, with its default and the values it accepts. A value out of range fails\n");
        b.append("when the configuration is built, naming the key and the value; an unknown key under a prefix a\n");
        b.append("component owns (`kvtransfer.`, `aeron.`, `ucx.`, `mpi.`, `cuda.`) is refused the same way, since it\n");
        b.append("is almost always a typo.\n\n");
        b.append("How to set them: `kvtransfer demo|serve|bench --set kvtransfer.KEY=VALUE` for the transceiver,\n");
        b.append("`--transport-set aeron.KEY=VALUE` for the transport; an engine embedding kvtransfer passes the same\n");
        b.append("names to `TransceiverConfig.fromProperties` and `TransportConfig.Builder.property`. Byte sizes of the\n");
        b.append("transceiver accept a 1024-based unit suffix (`64MB`, `8MiB`, `1G`).\n\n");
        b.append("Contents: [Transceiver](#transceiver-kvtransfer) · [TensorRT-LLM variables](#tensorrt-llm-environment-variables)");
        b.append(" · [Aeron](#aeron-transport-aeron) · [UCX](#ucx-transport-ucx) · [MPI](#mpi-transport-mpi)");
        b.append(" · [CUDA memory](#cuda-memory-plugin-cuda) · [JVM system properties](#jvm-system-properties)\n\n");

        section(b, "Transceiver (`kvtransfer.*`)",
                "`TransceiverConfig`, one per rank; see [architecture](architecture.md) and [core/README.md](../core/README.md).", TransceiverConfigKeys.CONFIG_KEYS);

        b.append("## TensorRT-LLM environment variables\n\n");
        b.append("A deployment configured for TensorRT-LLM's cache transceiver keeps its settings: these variables are\n");
        b.append("read as aliases of `kvtransfer.*` keys (`TrtllmEnvironment`); an explicit key wins over its alias.\n");
        b.append("Booleans are `1` / `0`, as upstream reads them.\n\n");
        b.append("| variable | stands for |\n| --- | --- |\n");
        for (Map.Entry<String, String> a : TrtllmEnvironment.ALIASES.entrySet()) {
            b.append("| `").append(a.getKey()).append("` | `").append(a.getValue()).append("` |\n");
        }
        TRTLLM_BACKENDS.entrySet().stream().sorted(Map.Entry.comparingByKey()).forEach(e ->
                b.append("| `").append(e.getKey()).append("` | ").append(e.getValue()).append(" |\n"));
        b.append("| `").append(TrtllmEnvironment.ZERO_COPY).append("` | no key: checked (1 or 0), the formatters "
                + "decide zero copy themselves |\n");
        b.append("| `TRTLLM_USE_NIXL_KVCACHE`, `TRTLLM_USE_MOONCAKE_KVCACHE` | refused when 1, naming the backends "
                + "kvtransfer has |\n\n");

        section(b, "Aeron transport (`aeron.*`)",
                "`AeronSettings`; the default transport, with an embedded media driver. See [transports](transports.md) "
                        + "and [backend-aeron/README.md](../backend-aeron/README.md).",
                AERON);
        section(b, "UCX transport (`ucx.*`)",
                "`UcxSettings`. See [transports](transports.md) and [backend-ucx/README.md](../backend-ucx/README.md).",
                UcxSettings.CONFIG_KEYS);
        section(b, "MPI transport (`mpi.*`)",
                "`MpiSettings`. See [transports](transports.md) and [backend-mpi/README.md](../backend-mpi/README.md).",
                MpiTransportProvider.CONFIG_KEYS);
        section(b, "CUDA memory plugin (`cuda.*`)",
                "`CudaMemoryProvider`: pools in GPU memory (`--pool-memory device`). See "
                        + "[memory-cuda/README.md](../memory-cuda/README.md).",
                CudaMemoryProvider.CONFIG_KEYS);
        section(b, "JVM system properties",
                "Set with `-Dname=value` (through `KVTRANSFER_JAVA_OPTS` for the launcher); read where they are used.",
                SYSTEM_PROPERTIES);
        b.append("The example `tcp` transport's `tcp.*` keys are in [its README](../examples/tcp-transport/README.md).\n");
        return b.toString();
    }

    private static void section(StringBuilder b, String title, String intro, List<ConfigKey> keys) {
        b.append("## ").append(title).append("\n\n").append(intro).append("\n\n");
        b.append("| key | default | accepted | meaning |\n| --- | --- | --- | --- |\n");
        for (ConfigKey k : keys) {
            b.append("| `").append(k.name()).append("` | ").append(k.defaultValue().isEmpty() ? "(empty)"
                            : "`" + k.defaultValue() + "`")
                    .append(" | ").append(cell(k.range())).append(" | ").append(cell(k.meaning())).append(" |\n");
        }
        b.append('\n');
    }

    private static String cell(String s) {
        return s.replace("|", "\\|");
    }

    /**
     * Writes the page.
     *
     * @param root the repository root
     * @throws IOException when it cannot be written
     */
    public static void write(Path root) throws IOException {
        Files.writeString(root.resolve(PAGE), render(), StandardCharsets.UTF_8);
    }
}
