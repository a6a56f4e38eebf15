package dev.kvtransfer.cli;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * {@code TransportGroupComm} across real OS processes: three members, each a child JVM with its own Aeron transport
 * (embedded driver, UDP on 127.0.0.1, the deployment secret), meet through {@code RankRendezvous}, run rounds of
 * known arrays (one of several chunks) and check every member's array; then one member is killed with SIGKILL and the
 * other two fail their next round with {@code PEER_LOST} naming it instead of hanging.
 */
class TransportGroupAeronTest {
    private static final Pattern LEADER = Pattern.compile("(?m)^leader (\\S+)$");
    @TempDir
    Path dir;
    private final List<ServeProcess> procs = new ArrayList<>();

    @AfterEach
    void stopAll() throws Exception {
        for (ServeProcess p : procs) {
            p.close();
            System.out.println("---- " + p.name + " ----\n" + p.output());
        }
    }

    private ServeProcess member(int rank, Path secret, String leader) throws Exception {
        List<String> args = new ArrayList<>(List.of(Integer.toString(rank), "3", secret.toString(), "30"));
        if (leader != null) {
            args.add(leader);
        }
        ServeProcess p = ServeProcess.startMain(dir, "member-" + rank, GroupMemberMain.class.getName(), args);
        procs.add(p);
        return p;
    }

    @Test
    void threeProcessesGatherInStepAndAKilledOneIsNamedByTheOthers() throws Exception {
        Path secret = dir.resolve("secret");
        Files.createFile(secret, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        byte[] s = new byte[32];
        new SecureRandom().nextBytes(s);
        Files.write(secret, s);
        ServeProcess m0 = member(0, secret, null);
        String[] leader = new String[1];
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(50)).until(() -> {
            Matcher m = LEADER.matcher(m0.output());
            if (m.find()) {
                leader[0] = m.group(1);
            }
            return leader[0] != null || !m0.process.isAlive();
        });
        assertThat(leader[0]).as(m0.output()).isNotNull();
        ServeProcess m1 = member(1, secret, leader[0]);
        ServeProcess m2 = member(2, secret, leader[0]);
        for (ServeProcess p : List.of(m0, m1, m2)) {
            await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(50))
                    .until(() -> p.output().contains("ok 30") || !p.process.isAlive());
            assertThat(p.output()).as(p.name).contains("ok 30");
        }
        // All three sit in the extra round; member 2 dies without a word.
        m2.kill();
        for (ServeProcess p : List.of(m0, m1)) {
            assertThat(p.waitFor(60)).as(p.output()).isZero();
            assertThat(p.output()).as(p.name).containsPattern("failed PEER_LOST .*member 2 \\(127\\.0\\.0\\.1:");
        }
    }
}
