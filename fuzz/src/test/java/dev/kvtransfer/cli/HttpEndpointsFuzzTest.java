package dev.kvtransfer.cli;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.RegistryAuth;
import org.junit.jupiter.api.AfterAll;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.Method;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The HTTP ports the cli opens, through a real socket on loopback: the router's control endpoint (the registry
 * routes of {@code kvtransfer route}, with the deployment secret and the router's own record validator) and the
 * metrics endpoint. An input is raw bytes, or a request built from it and signed with the secret (the insider
 * case: a holder of the secret sends bodies no genuine instance would). Every request is answered with a status
 * below 500 (a hostile request is a 4xx, never a 500 of an escaped exception) or the connection is closed, within
 * the server's read deadline; the server keeps serving.
 */
class HttpEndpointsFuzzTest {
    private static final byte[] SECRET = "fuzzing secret of thirty-two b..".getBytes(StandardCharsets.US_ASCII);
    private static final RegistryAuth AUTH = RegistryAuth.of(SECRET);
    private static final String[] METHODS = {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"};
    private static final String[] PATHS = {"/v1/registry/instances", "/v1/registry/instances/ctx-a0/heartbeat",
        "/v1/registry/instances/ctx-a0/deregister", "/v1/registry/stats", "/v1/health", "/metrics", "/"};
    private static RouterEndpoint router;
    private static MetricsEndpoint metrics;

    private static synchronized RouterEndpoint router() throws Exception {
        if (router == null) {
            Method validate = RouteCommand.class.getDeclaredMethod("validate", InstanceRecord.class);
            validate.setAccessible(true);
            Consumer<InstanceRecord> validator = r -> {
                try {
                    validate.invoke(null, r);
                } catch (java.lang.reflect.InvocationTargetException e) {
                    throw (RuntimeException) e.getCause();
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            };
            router = RouterEndpoint.start(null, AUTH, new Listen("127.0.0.1", 0), Duration.ofSeconds(30), validator);
        }
        return router;
    }

    private static synchronized MetricsEndpoint metrics() {
        if (metrics == null) {
            metrics = MetricsEndpoint.start(java.net.InetAddress.getLoopbackAddress(), 0);
        }
        return metrics;
    }

    @AfterAll
    static void close() throws Exception {
        if (router != null) {
            router.close();
            router = null;
        }
        if (metrics != null) {
            metrics.close();
            metrics = null;
        }
    }

    @FuzzTest(maxDuration = "10m")
    void routerEndpoint(byte[] data) throws Exception {
        java.net.URI u = java.net.URI.create(router().describe().split(" ")[0]);
        exchange(u.getPort(), data);
    }

    @FuzzTest(maxDuration = "10m")
    void metricsEndpoint(byte[] data) throws Exception {
        exchange(metrics().port(), data);
    }

    /**
     * First byte 0: the rest is sent raw. Otherwise: {@code [method][path][u8 path length][path bytes][body]}
     * where method and path pick from the routes (path 255 = the input's own bytes), signed with the secret.
     */
    private static void exchange(int port, byte[] data) throws IOException {
        byte[] wire;
        String what;
        if (data.length < 3 || data[0] == 0) {
            wire = data.length == 0 ? data : java.util.Arrays.copyOfRange(data, 1, data.length);
            what = "raw";
        } else {
            String method = METHODS[(data[1] & 0xff) % METHODS.length];
            int pick = data[2] & 0xff;
            int at = 3;
            String path;
            if (pick == 255 && data.length > 3) {
                int n = Math.min(data[3] & 0xff, data.length - 4);
                path = "/" + new String(data, 4, n, StandardCharsets.ISO_8859_1).replaceAll("[^!-~]", "_");
                at = 4 + n;
            } else {
                path = PATHS[pick % PATHS.length];
            }
            byte[] body = java.util.Arrays.copyOfRange(data, at, data.length);
            what = method + " " + path;
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            String sig = AUTH.sign(method, path, body);
            out.writeBytes((method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    + RegistryAuth.HEADER + ": " + sig + "\r\nContent-Length: " + body.length
                    + "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.ISO_8859_1));
            out.writeBytes(body);
            wire = out.toByteArray();
        }
        String status = send(port, wire);
        if (status != null && status.startsWith("HTTP/1.1 5")) {
            throw new AssertionError(what + " answered " + status);
        }
    }

    /** @return the status line, or null when the server closed without one */
    private static String send(int port, byte[] wire) throws IOException {
        try (Socket s = new Socket(java.net.InetAddress.getLoopbackAddress(), port)) {
            s.setSoTimeout(15_000);
            OutputStream out = s.getOutputStream();
            try {
                out.write(wire);
                out.flush();
                s.shutdownOutput();
            } catch (IOException e) {
                return null; // closed by the server before it read everything
            }
            InputStream in = s.getInputStream();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            try {
                for (int n; (n = in.read(buf)) >= 0; ) {
                    got.write(buf, 0, n);
                }
            } catch (SocketTimeoutException e) {
                throw new AssertionError("no answer and no close within 15 s", e);
            } catch (IOException e) {
                // reset
            }
            String text = got.toString(StandardCharsets.ISO_8859_1);
            int eol = text.indexOf("\r\n");
            int bodyAt = text.indexOf("\r\n\r\n");
            String body = bodyAt < 0 ? "" : " " + text.substring(bodyAt + 4, Math.min(text.length(), bodyAt + 400));
            return eol < 0 ? (text.isEmpty() ? null : text) : text.substring(0, eol) + body;
        }
    }
}
