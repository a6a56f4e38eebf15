package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.function.Function;
import java.util.stream.Collectors;

/**
 * Finds the transport and formatter plugins on the class path ({@link ServiceLoader}) and selects them by name.
 * A missing, unavailable or broken plugin fails with a message listing what <em>was</em> found and, for
 * unavailable transports, why ({@code "transport 'ucx' is not available: libucp missing; found: aeron
 * (available), loopback (available)"}). Discovery happens once, in the constructor; a plugin whose provider
 * class fails to load is remembered as broken with its error instead of aborting discovery.
 */
public final class Plugins {
    private final List<TransportProvider> transports;
    private final List<FormatterProvider> formatters;
    private final List<String> broken;

    /**
     * Discovers plugins with a class loader.
     *
     * @param loader where to look
     */
    public Plugins(ClassLoader loader) {
        Objects.requireNonNull(loader, "loader");
        List<String> bad = new ArrayList<>();
        this.transports = load(TransportProvider.class, loader, bad);
        this.formatters = load(FormatterProvider.class, loader, bad);
        this.broken = List.copyOf(bad);
    }

    /**
     * Uses explicit providers (tests, or engines that wire plugins themselves).
     *
     * @param transports transport providers
     * @param formatters formatter providers
     */
    public Plugins(List<TransportProvider> transports, List<FormatterProvider> formatters) {
        this.transports = List.copyOf(transports);
        this.formatters = List.copyOf(formatters);
        this.broken = List.of();
    }

    /** @return plugins visible to the thread's context class loader (or this class's loader) */
    public static Plugins discover() {
        ClassLoader cl = Thread.currentThread().getContextClassLoader();
        return new Plugins(cl != null ? cl : Plugins.class.getClassLoader());
    }

    private static <T> List<T> load(Class<T> type, ClassLoader loader, List<String> bad) {
        List<T> out = new ArrayList<>();
        Iterator<T> it = ServiceLoader.load(type, loader).iterator();
        while (true) {
            try {
                if (!it.hasNext()) {
                    break;
                }
                out.add(it.next());
            } catch (ServiceConfigurationError e) {
                bad.add(type.getSimpleName() + ": " + e.getMessage());
            }
        }
        return Collections.unmodifiableList(out);
    }

    /** @return every transport provider found */
    public List<TransportProvider> transports() {
        return transports;
    }

    /** @return every formatter provider found */
    public List<FormatterProvider> formatters() {
        return formatters;
    }

    /** @return descriptions of providers that failed to load */
    public List<String> broken() {
        return broken;
    }

    /**
     * The transport with that name, which must be available.
     *
     * @param name provider name
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when absent or unavailable, listing what was found
     */
    public TransportProvider transport(String name) {
        Objects.requireNonNull(name, "name");
        for (TransportProvider p : transports) {
            if (safeName(p, TransportProvider::name).equals(name)) {
                if (!available(p)) {
                    throw new KvTransferException(ErrorCode.INTERNAL, "transport '" + name + "' is not available: "
                            + cause(p) + "; found: " + describeTransports());
                }
                return p;
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no transport named '" + name + "'; found: "
                + describeTransports() + brokenSuffix());
    }

    /**
     * The formatter with that name.
     *
     * @param name provider name
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when absent, listing what was found
     */
    public FormatterProvider formatter(String name) {
        Objects.requireNonNull(name, "name");
        for (FormatterProvider p : formatters) {
            if (safeName(p, FormatterProvider::name).equals(name)) {
                return p;
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no formatter named '" + name + "'; found: "
                + describeFormatters() + brokenSuffix());
    }

    /**
     * The formatter that handles an attention type (the first found, in class-path order).
     *
     * @param type the attention type
     * @return the provider
     * @throws KvTransferException ({@code INTERNAL}) when none handles it, listing what was found
     */
    public FormatterProvider formatterFor(AttentionType type) {
        Objects.requireNonNull(type, "type");
        for (FormatterProvider p : formatters) {
            try {
                if (p.handles(type)) {
                    return p;
                }
            } catch (RuntimeException e) {
                // A broken provider must not hide the others.
            }
        }
        throw new KvTransferException(ErrorCode.INTERNAL, "no formatter installed for " + type + " attention; found: "
                + describeFormatters() + brokenSuffix());
    }

    /** @return e.g. {@code "aeron (available), ucx (unavailable: libucp missing)"}, or {@code "none"} */
    public String describeTransports() {
        if (transports.isEmpty()) {
            return "none";
        }
        return transports.stream()
                .map(p -> safeName(p, TransportProvider::name) + (available(p) ? " (available)"
                        : " (unavailable: " + cause(p) + ")"))
                .sorted()
                .collect(Collectors.joining(", "));
    }

    /** @return e.g. {@code "mla (MLA), standard (DEFAULT)"}, or {@code "none"} */
    public String describeFormatters() {
        if (formatters.isEmpty()) {
            return "none";
        }
        return formatters.stream().map(p -> {
            List<String> kinds = new ArrayList<>();
            for (AttentionType t : AttentionType.values()) {
                try {
                    if (p.handles(t)) {
                        kinds.add(t.name());
                    }
                } catch (RuntimeException e) {
                    kinds.add("broken: " + e);
                }
            }
            return safeName(p, FormatterProvider::name) + " (" + String.join(", ", kinds) + ")";
        }).sorted().collect(Collectors.joining(", "));
    }

    private String brokenSuffix() {
        return broken.isEmpty() ? "" : "; failed to load: " + String.join("; ", broken);
    }

    private static <T> String safeName(T p, Function<T, String> name) {
        try {
            return String.valueOf(name.apply(p));
        } catch (RuntimeException e) {
            return p.getClass().getName() + " (name() failed: " + e + ")";
        }
    }

    private static boolean available(TransportProvider p) {
        try {
            return p.isAvailable();
        } catch (RuntimeException | LinkageError e) {
            return false;
        }
    }

    private static String cause(TransportProvider p) {
        try {
            String c = p.unavailabilityCause();
            return c == null ? "no reason given" : c;
        } catch (RuntimeException | LinkageError e) {
            return "isAvailable/unavailabilityCause failed: " + e;
        }
    }

    @Override
    public String toString() {
        return "Plugins{transports: " + describeTransports() + "; formatters: " + describeFormatters() + "}";
    }
}
