package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.ErrorHandler;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;

/**
 * Configuration handed to {@link TransportProvider#create}: where to listen, the default deadline,
 * transport-specific properties (documented by each transport's README), where background errors go, and the
 * deployment's shared secret. A backend reads its own properties (prefix {@code <name>.}) in one settings class
 * and refuses unknown keys of its own prefix at {@code create} ({@link #checkKnownProperties}); keys of other
 * prefixes are ignored, so one property map can configure every backend. Immutable; validated in
 * {@link Builder#build()}.
 */
public final class TransportConfig {
    /** Default host to bind. */
    public static final String DEFAULT_HOST = "127.0.0.1";
    /** Default deadline for calls without an explicit timeout. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(30);

    private final String name;
    private final String host;
    private final int port;
    private final Duration defaultTimeout;
    private final Map<String, String> properties;
    private final ErrorHandler errorHandler;
    private final byte[] authSecret;

    private TransportConfig(Builder b) {
        this.name = b.name;
        this.host = b.host;
        this.port = b.port;
        this.defaultTimeout = b.defaultTimeout;
        this.properties = Map.copyOf(b.properties);
        this.errorHandler = b.errorHandler;
        this.authSecret = b.authSecret == null ? null : b.authSecret.clone();
    }

    /** @return a builder with defaults */
    public static Builder builder() {
        return new Builder();
    }

    /** @return a name for logs and thread names, e.g. {@code "ctx-rank-0"} */
    public String name() {
        return name;
    }

    /** @return host to bind */
    public String host() {
        return host;
    }

    /** @return port to bind, 0 = any free port */
    public int port() {
        return port;
    }

    /** @return deadline of calls without an explicit timeout */
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    /** @return transport-specific properties */
    public Map<String, String> properties() {
        return properties;
    }

    /**
     * A property or a default.
     *
     * @param key          property name
     * @param defaultValue value when absent
     * @return the value
     */
    public String property(String key, String defaultValue) {
        return properties.getOrDefault(key, defaultValue);
    }

    /**
     * An integer property or a default.
     *
     * @param key          property name
     * @param defaultValue value when absent
     * @return the value
     * @throws IllegalArgumentException naming the key and value when it is not an integer
     */
    public long longProperty(String key, long defaultValue) {
        String v = properties.get(key);
        if (v == null) {
            return defaultValue;
        }
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("transport property " + key + " = '" + v + "': not an integer");
        }
    }

    /**
     * Where the transport's background threads report errors (a message that could not be delivered, a peer
     * that misbehaved, a handshake that failed): counted and logged by whoever passed it; never throws.
     *
     * @return the handler (a no-op unless one was set)
     */
    public ErrorHandler errorHandler() {
        return errorHandler;
    }

    /**
     * The deployment's shared secret: when present the transport authenticates its own handshakes with it
     * (HMAC-SHA256) and refuses peers that cannot. Never logged.
     *
     * @return a copy of the secret, or {@code null} when authentication is off
     */
    public byte[] authSecret() {
        return authSecret == null ? null : authSecret.clone();
    }

    /**
     * Refuses unknown properties of one prefix, naming the key and the known ones (typos are almost always
     * the cause). Keys of other prefixes are left to their transports.
     *
     * @param prefix the backend's prefix, e.g. {@code "aeron."}
     * @param known  the backend's known keys (full names)
     * @throws IllegalArgumentException naming the first unknown key, its value and the known keys
     */
    public void checkKnownProperties(String prefix, Set<String> known) {
        Objects.requireNonNull(prefix, "prefix");
        Objects.requireNonNull(known, "known");
        for (Map.Entry<String, String> e : new TreeMap<>(properties).entrySet()) {
            if (e.getKey().startsWith(prefix) && !known.contains(e.getKey())) {
                throw new IllegalArgumentException("unknown transport property " + e.getKey() + " = '"
                        + e.getValue() + "'; known: " + String.join(", ", new java.util.TreeSet<>(known)));
            }
        }
    }

    /**
     * A builder holding this config's values.
     *
     * @return a builder
     */
    public Builder toBuilder() {
        Builder b = builder().name(name).host(host).port(port).defaultTimeout(defaultTimeout)
                .properties(properties).errorHandler(errorHandler);
        if (authSecret != null) {
            b.authSecret(authSecret);
        }
        return b;
    }

    @Override
    public String toString() {
        return "TransportConfig{" + name + " " + host + ":" + port + " timeout=" + defaultTimeout
                + " " + new TreeMap<>(properties) + (authSecret != null ? " auth" : "") + "}";
    }

    /** Builds a {@link TransportConfig}. */
    public static final class Builder {
        private String name = "kvtransfer";
        private String host = DEFAULT_HOST;
        private int port;
        private Duration defaultTimeout = DEFAULT_TIMEOUT;
        private final Map<String, String> properties = new TreeMap<>();
        private ErrorHandler errorHandler = e -> { };
        private byte[] authSecret;

        private Builder() {
        }

        /**
         * @param v where background errors go
         * @return this builder
         */
        public Builder errorHandler(ErrorHandler v) {
            this.errorHandler = Objects.requireNonNull(v, "errorHandler");
            return this;
        }

        /**
         * @param v the deployment's shared secret (at least 16 bytes), or {@code null} for no authentication
         * @return this builder
         */
        public Builder authSecret(byte[] v) {
            this.authSecret = v == null ? null : v.clone();
            return this;
        }

        /**
         * @param v name for logs
         * @return this builder
         */
        public Builder name(String v) {
            this.name = Objects.requireNonNull(v, "name");
            return this;
        }

        /**
         * @param v host to bind
         * @return this builder
         */
        public Builder host(String v) {
            this.host = Objects.requireNonNull(v, "host");
            return this;
        }

        /**
         * @param v port, 0 = any
         * @return this builder
         */
        public Builder port(int v) {
            this.port = v;
            return this;
        }

        /**
         * @param v default deadline
         * @return this builder
         */
        public Builder defaultTimeout(Duration v) {
            this.defaultTimeout = Objects.requireNonNull(v, "defaultTimeout");
            return this;
        }

        /**
         * @param key   property name
         * @param value property value
         * @return this builder
         */
        public Builder property(String key, String value) {
            properties.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
            return this;
        }

        /**
         * @param all properties to add
         * @return this builder
         */
        public Builder properties(Map<String, String> all) {
            all.forEach(this::property);
            return this;
        }

        /**
         * Validates and builds.
         *
         * @return the config
         * @throws IllegalArgumentException naming the offending key and value
         */
        public TransportConfig build() {
            if (port < 0 || port > 65535) {
                throw new IllegalArgumentException("port = " + port + ": must be in [0, 65535]");
            }
            if (defaultTimeout.isNegative() || defaultTimeout.isZero()) {
                throw new IllegalArgumentException("defaultTimeout = " + defaultTimeout + ": must be positive");
            }
            if (host.isBlank()) {
                throw new IllegalArgumentException("host = '" + host + "': must not be blank");
            }
            if (authSecret != null && authSecret.length < 16) {
                throw new IllegalArgumentException("authSecret of " + authSecret.length + " bytes: must be at "
                        + "least 16 bytes");
            }
            return new TransportConfig(this);
        }
    }
}
