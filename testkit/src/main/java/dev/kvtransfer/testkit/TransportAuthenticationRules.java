package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * SPEC.md §1 rules of authentication ({@link TransportCapability#AUTHENTICATED}): a transport that honours
 * {@code TransportConfig.authSecret()} refuses a peer that cannot prove the secret, and says so. A refusal that
 * looks like a slow network ({@code TIMEOUT}) sends an operator after the wrong cause; one that lets a message
 * through is a hole. Every payload is checked byte by byte.
 */
public abstract class TransportAuthenticationRules extends TransportPostedSendRules {
    private static final byte[] SECRET = "conformance-secret-of-32-bytes!!".getBytes(StandardCharsets.UTF_8);
    private static final byte[] OTHER_SECRET = "another-secret-of-thirty-two-by!".getBytes(StandardCharsets.UTF_8);

    @Test
    public void optional_spec1_33_aPeerWithoutTheSecretIsRefusedUnauthorizedAndDeliversNothing() throws Exception {
        Assumptions.assumeTrue(provider().capabilities().contains(TransportCapability.AUTHENTICATED),
                provider().name() + " does not declare AUTHENTICATED: it authenticates no peer (clause 1.33 applies"
                        + " to transports that do)");
        Duration deadline = Duration.ofSeconds(20);
        ConnectionManager a = newManager(b -> b.authSecret(SECRET).defaultTimeout(deadline));
        ConnectionManager other = newManager(b -> b.authSecret(OTHER_SECRET).defaultTimeout(deadline));
        ConnectionManager none = newManager(b -> b.authSecret(null).defaultTimeout(deadline));
        MemoryBuffer buf = buffer(1 << 20);
        fill(buf, 0, 64, 33);
        for (ConnectionManager intruder : List.of(other, none)) {
            String who = intruder == other ? "a peer with another secret" : "a peer without a secret";
            long t0 = System.nanoTime();
            try {
                Connection c = intruder.connection(a.localAddress());
                try {
                    c.send(3300, buf, 0, 64, deadline); // may be eager: a must still deliver nothing of it
                } catch (TransportException e) {
                    assertUnauthorized(who, "send", e);
                }
                // A receive from a that refused us: it must end UNAUTHORIZED, not wait out its deadline.
                assertThatThrownBy(() -> c.recv(3301, buf, 4096, 64, deadline))
                        .as("%s: a receive from the peer that refused it", who)
                        .isInstanceOfSatisfying(TransportException.class, e -> assertUnauthorized(who, "recv", e));
            } catch (TransportException e) {
                assertUnauthorized(who, "connection", e); // refused while the connection was made
            }
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertThat(ms).as("%s: refused before its deadline", who).isLessThan(deadline.toMillis());
        }
        // a delivered nothing of theirs.
        assertThat(a.pollConnect(3300, buf, 8192, 64, Duration.ofMillis(300)))
                .as("a message from a peer that was refused").isNull();
        // A peer with the secret is served as before, both ways, every byte.
        ConnectionManager genuine = newManager(b -> b.authSecret(SECRET).defaultTimeout(deadline));
        MemoryBuffer src = buffer(EAGER_BYTES);
        MemoryBuffer dst = buffer(EAGER_BYTES);
        fill(src, 0, EAGER_BYTES, 3302);
        Connection toA = genuine.connection(a.localAddress());
        toA.send(3302, src, 0, EAGER_BYTES, deadline);
        Connection fromGenuine = a.pollConnect(3302, dst, 0, EAGER_BYTES, deadline);
        assertThat(fromGenuine).as("the genuine peer's message").isNotNull();
        verify(dst, 0, EAGER_BYTES, 3302);
        fill(src, 0, EAGER_BYTES, 3303);
        fromGenuine.send(3303, src, 0, EAGER_BYTES, deadline);
        toA.recv(3303, dst, 0, EAGER_BYTES, deadline);
        verify(dst, 0, EAGER_BYTES, 3303);
    }

    private static void assertUnauthorized(String who, String call, TransportException e) {
        assertThat(e.code()).as("%s: %s failed with %s", who, call, e).isEqualTo(ErrorCode.UNAUTHORIZED);
        assertThat(e.getMessage()).as("%s: the secret is never in an error", who)
                .doesNotContain(new String(SECRET, StandardCharsets.UTF_8))
                .doesNotContain(new String(OTHER_SECRET, StandardCharsets.UTF_8));
    }
}
