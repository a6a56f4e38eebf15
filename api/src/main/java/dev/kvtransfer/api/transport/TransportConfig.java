package dev.kvtransfer.api.transport;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * Configuration handed to {@link TransportProvider#create}: where to listen, the default deadline and
 * transport-specific properties (documented by each transport's README; unknown keys are ignored).
 * Immutable; validated in {@link Builder#build()}.
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

    private TransportConfig(Builder b) {
        this.name = b.name;
        this.host = b.host;
        this.port = b.port;
        this.defaultTimeout = b.defaultTimeout;
        this.properties = Map.copyOf(b.properties);
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

    @Override
    public String toString() {
        return "TransportConfig{" + name + " " + host + ":" + port + " timeout=" + defaultTimeout
                + " " + new TreeMap<>(properties) + "}";
    }

    /** Builds a {@link TransportConfig}. */
    public static final class Builder {
        private String name = "kvtransfer";
        private String host = DEFAULT_HOST;
        private int port;
        private Duration defaultTimeout = DEFAULT_TIMEOUT;
        private final Map<String, String> properties = new TreeMap<>();

        private Builder() {
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
            return new TransportConfig(this);
        }
    }
}
