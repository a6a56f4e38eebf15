package dev.kvtransfer.cli;

import dev.kvtransfer.registry.HttpServers;
import org.junit.jupiter.api.Test;

import java.io.OutputStream;
import java.net.Socket;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Slow clients: connections that hold a partial request line (23 bytes, never finished) used to make every
 * scrape time out for as long as they stayed open (95 s and more: one scrape thread, no read deadline). Now each
 * connection has a read deadline and scrapes run on a small pool.
 */
class MetricsEndpointSlowClientTest {
    @Test
    void partialRequestLinesDoNotBlockScrapes() throws Exception {
        try (MetricsEndpoint endpoint = MetricsEndpoint.start(0)) {
            List<Socket> slow = new ArrayList<>();
            try {
                // More slow connections than scrape threads.
                for (int i = 0; i < 10; i++) {
                    Socket s = new Socket("127.0.0.1", endpoint.port());
                    OutputStream o = s.getOutputStream();
                    o.write("GET /metrics HTTP/1.1\r\nH".getBytes(StandardCharsets.US_ASCII), 0, 23);
                    o.flush();
                    slow.add(s);
                }
                HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
                long t0 = System.nanoTime();
                HttpResponse<String>[] got = new HttpResponse[1];
                await().atMost(Duration.ofSeconds(HttpServers.READ_DEADLINE_SECONDS * 3)).ignoreExceptions()
                        .until(() -> {
                            got[0] = http.send(HttpRequest.newBuilder(endpoint.uri())
                                    .timeout(Duration.ofSeconds(HttpServers.READ_DEADLINE_SECONDS + 2)).build(),
                                    HttpResponse.BodyHandlers.ofString());
                            return got[0].statusCode() == 200;
                        });
                long ms = (System.nanoTime() - t0) / 1_000_000;
                System.out.println("scrape answered after " + ms + " ms with " + slow.size()
                        + " connections holding a partial request line");
                assertThat(got[0].body()).contains("jvm_memory_used_bytes");
                assertThat(ms).isLessThan(HttpServers.READ_DEADLINE_SECONDS * 3000);
            } finally {
                for (Socket s : slow) {
                    s.close();
                }
            }
        }
    }
}
