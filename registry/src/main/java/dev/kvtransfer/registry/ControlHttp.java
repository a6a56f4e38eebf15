package dev.kvtransfer.registry;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;

/**
 * HTTP/JSON plumbing shared by the registry server, the instance control endpoint and their clients: signed
 * requests ({@link RegistryAuth}), bodies of at most {@value #MAX_BODY} bytes, errors as
 * {@code {"error": "<one line>", "kind": "<kind>"}} with a status code.
 */
public final class ControlHttp {
    /** Largest request or response body read. */
    public static final int MAX_BODY = 1 << 20;
    /** JSON (Jackson, unknown fields ignored so a newer peer's extra fields do not break an older one). */
    public static final ObjectMapper JSON = new ObjectMapper()
            .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    private ControlHttp() {
    }

    /** What a handler answers: a status and a JSON-serialisable body. */
    public record Reply(int status, Object body) {
        /**
         * @param body the body
         * @return 200 with it
         */
        public static Reply ok(Object body) {
            return new Reply(200, body);
        }

        /**
         * @param status the status
         * @param kind   the error kind (a {@link RegistryException.Kind} name or another short word)
         * @param line   one line
         * @return the error reply
         */
        public static Reply error(int status, String kind, String line) {
            return new Reply(status, Map.of("error", line, "kind", kind));
        }
    }

    /** One route's logic. */
    @FunctionalInterface
    public interface Handler {
        /**
         * @param method the HTTP method
         * @param path   the path
         * @param body   the request body
         * @return the reply
         * @throws Exception turned into a 500 (or the status a {@link RegistryException} maps to)
         */
        Reply handle(String method, String path, byte[] body) throws Exception;
    }

    /**
     * Runs a handler for one exchange: reads the body (bounded), checks the signature unless {@code open}, writes
     * the JSON reply; a refused signature is {@code 401}.
     *
     * @param exchange the exchange
     * @param auth     the authenticator
     * @param open     whether the route needs no signature (health, readiness)
     * @param handler  the logic
     * @throws IOException when the reply cannot be written
     */
    public static void serve(HttpExchange exchange, RegistryAuth auth, boolean open, Handler handler)
            throws IOException {
        try (exchange) {
            String method = exchange.getRequestMethod();
            String path = exchange.getRequestURI().getPath();
            Reply reply;
            byte[] body;
            try {
                body = readBounded(exchange.getRequestBody());
            } catch (IOException e) {
                write(exchange, Reply.error(413, RegistryException.Kind.BAD_REQUEST.name(), e.getMessage()));
                return;
            }
            String why = open ? "" : auth.verify(method, path, body,
                    exchange.getRequestHeaders().getFirst(RegistryAuth.HEADER));
            if (!why.isEmpty()) {
                reply = Reply.error(401, RegistryException.Kind.UNAUTHORIZED.name(), method + " " + path + ": " + why);
            } else {
                try {
                    reply = handler.handle(method, path, body);
                } catch (RegistryException e) {
                    reply = Reply.error(status(e.kind()), e.kind().name(), e.getMessage());
                } catch (IllegalArgumentException | com.fasterxml.jackson.core.JacksonException e) {
                    reply = Reply.error(400, RegistryException.Kind.BAD_REQUEST.name(), method + " " + path + ": "
                            + e.getMessage().replaceAll("\\s+", " "));
                } catch (Exception e) {
                    reply = Reply.error(500, "INTERNAL", method + " " + path + ": " + e);
                }
            }
            write(exchange, reply);
        }
    }

    /**
     * Decodes a request body that must hold one JSON object of the given type.
     *
     * @param body the body
     * @param type the type
     * @param what names the call in the error
     * @param <T>  the type
     * @return the object, never null
     * @throws IllegalArgumentException when the body is not JSON of that type, or is the JSON {@code null}
     *                                  (answered 400)
     */
    public static <T> T read(byte[] body, Class<T> type, String what) {
        T value;
        try {
            value = JSON.readValue(body, type);
        } catch (IOException e) {
            // Not only Jackson's own exceptions: a body Jackson takes for UTF-32 (it guesses the encoding from the
            // first bytes) fails with a CharConversionException, which a route would have answered with a 500.
            throw new IllegalArgumentException(what + ": the body is not a " + type.getSimpleName() + " in JSON ("
                    + String.valueOf(e.getMessage()).replaceAll("\\s+", " ") + ")", e);
        }
        if (value == null) {
            // A body of "null" decodes to no object: refused here, not dereferenced by the route (a 500).
            throw new IllegalArgumentException(what + ": the body is the JSON null, expected a "
                    + type.getSimpleName() + " object");
        }
        return value;
    }

    private static int status(RegistryException.Kind kind) {
        return switch (kind) {
            case UNAUTHORIZED -> 401;
            case DUPLICATE -> 409;
            case UNKNOWN_INSTANCE -> 404;
            case BAD_REQUEST -> 400;
            case UNAVAILABLE -> 503;
        };
    }

    private static void write(HttpExchange exchange, Reply reply) throws IOException {
        byte[] out = JSON.writeValueAsBytes(reply.body());
        exchange.getResponseHeaders().set("Content-Type", "application/json");
        exchange.sendResponseHeaders(reply.status(), out.length);
        try (OutputStream os = exchange.getResponseBody()) {
            os.write(out);
        }
    }

    private static byte[] readBounded(InputStream in) throws IOException {
        byte[] b = in.readNBytes(MAX_BODY + 1);
        if (b.length > MAX_BODY) {
            throw new IOException("request body over " + MAX_BODY + " bytes");
        }
        return b;
    }

    /** A signed JSON client of one base URL. */
    public static final class Client {
        private final URI base;
        private final RegistryAuth auth;
        private final HttpClient http;
        private final String what;

        /**
         * @param base    e.g. {@code http://127.0.0.1:7000}
         * @param auth    signs every request
         * @param connect connect timeout
         * @param what    what the URL is, for errors ({@code registry}, {@code instance ctx-0})
         */
        public Client(URI base, RegistryAuth auth, Duration connect, String what) {
            this.base = Objects.requireNonNull(base, "base");
            this.auth = Objects.requireNonNull(auth, "auth");
            this.what = Objects.requireNonNull(what, "what");
            if (!"http".equals(base.getScheme()) || base.getHost() == null || base.getPort() < 1) {
                throw new RegistryException(RegistryException.Kind.BAD_REQUEST, what + " URL '" + base
                        + "': expected http://HOST:PORT");
            }
            this.http = HttpClient.newBuilder().connectTimeout(connect).version(HttpClient.Version.HTTP_1_1).build();
        }

        /** @return the base URL */
        public URI base() {
            return base;
        }

        /**
         * Sends one request and decodes the reply.
         *
         * @param method  GET, POST, PUT or DELETE
         * @param path    the path
         * @param body    the JSON body (null for none)
         * @param type    the reply type
         * @param timeout the whole request's deadline
         * @param <T>     reply type
         * @return the decoded reply
         * @throws RegistryException with the server's one-line error, or {@code UNAVAILABLE} naming the URL when it
         *                           cannot be reached in time
         */
        public <T> T call(String method, String path, Object body, Class<T> type, Duration timeout) {
            byte[] bytes;
            try {
                bytes = body == null ? new byte[0] : JSON.writeValueAsBytes(body);
            } catch (IOException e) {
                throw new IllegalArgumentException("cannot encode " + path + ": " + e.getMessage(), e);
            }
            HttpRequest.Builder b = HttpRequest.newBuilder(base.resolve(path)).timeout(timeout)
                    .header("Content-Type", "application/json")
                    .method(method, bytes.length == 0 ? HttpRequest.BodyPublishers.noBody()
                            : HttpRequest.BodyPublishers.ofByteArray(bytes));
            String sig = auth.sign(method, path, bytes);
            if (!sig.isEmpty()) {
                b.header(RegistryAuth.HEADER, sig);
            }
            HttpResponse<byte[]> r;
            try {
                r = http.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
            } catch (HttpConnectTimeoutException e) {
                throw unavailable("no connection within the connect timeout", e);
            } catch (HttpTimeoutException e) {
                throw unavailable("no answer within " + timeout.toMillis() + " ms", e);
            } catch (ConnectException e) {
                throw unavailable("cannot connect (" + (e.getMessage() == null ? "connection refused"
                        : e.getMessage()) + ")", e);
            } catch (IOException e) {
                throw unavailable("connection failed (" + e.getClass().getSimpleName()
                        + (e.getMessage() == null ? "" : ": " + e.getMessage()) + ")", e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw unavailable("interrupted", e);
            }
            try {
                if (r.statusCode() / 100 != 2) {
                    Map<?, ?> err = r.body().length == 0 ? Map.of() : JSON.readValue(r.body(), Map.class);
                    Object kind = err.get("kind");
                    RegistryException.Kind k = RegistryException.Kind.BAD_REQUEST;
                    for (RegistryException.Kind c : RegistryException.Kind.values()) {
                        if (c.name().equals(kind)) {
                            k = c;
                        }
                    }
                    Object line = err.get("error");
                    throw new ServerError(k, String.valueOf(kind), what + " " + base + ": " + (line != null ? line
                            : "HTTP " + r.statusCode()), r.statusCode());
                }
                return JSON.readValue(r.body(), type);
            } catch (IOException e) {
                throw new RegistryException(RegistryException.Kind.BAD_REQUEST, what + " " + base + path
                        + ": the reply is not the expected JSON (" + e.getMessage().replaceAll("\\s+", " ") + ")", e);
            }
        }

        private RegistryException unavailable(String why, Exception e) {
            return new RegistryException(RegistryException.Kind.UNAVAILABLE, what + " " + base + ": " + why, e);
        }
    }

    /** An error reply from the server: its kind word as sent, and the status. */
    public static final class ServerError extends RegistryException {
        private static final long serialVersionUID = 1L;
        private final String kindWord;
        private final int status;

        ServerError(RegistryException.Kind kind, String kindWord, String message, int status) {
            super(kind, message);
            this.kindWord = kindWord;
            this.status = status;
        }

        /** @return the server's kind word (may be outside {@link RegistryException.Kind}, e.g. a transfer code) */
        public String kindWord() {
            return kindWord;
        }

        /** @return the HTTP status */
        public int status() {
            return status;
        }
    }

    /**
     * @param text a string
     * @return its UTF-8 bytes
     */
    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
