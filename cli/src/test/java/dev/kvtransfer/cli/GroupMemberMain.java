package dev.kvtransfer.cli;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.sync.RankRendezvous;
import dev.kvtransfer.core.sync.TransportGroupComm;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;

/**
 * One member of a {@link TransportGroupComm} over Aeron in its own JVM ({@link TransportGroupAeronTest}):
 * {@code RANK SIZE SECRET_FILE ROUNDS [LEADER]}. Rank 0 prints {@code leader <address>}; every member runs
 * ROUNDS allgathers of known arrays, checks every member's array and prints {@code ok <rounds>}; then every member
 * but the last (which waits to be killed) calls one more round, which fails once the last member is killed
 * ({@code failed <code> <message>}).
 */
public final class GroupMemberMain {
    private GroupMemberMain() {
    }

    static long[] values(int round, int rank) {
        // Round 5 carries more than one 64 KiB chunk per member.
        int n = (round * 7 + rank) % 11 + (round == 5 ? 8192 + 3 : 0);
        long[] v = new long[n];
        for (int i = 0; i < n; i++) {
            v[i] = ((long) round << 40) ^ ((long) rank << 20) ^ i;
        }
        return v;
    }

    public static void main(String[] args) throws Exception {
        int rank = Integer.parseInt(args[0]);
        int size = Integer.parseInt(args[1]);
        byte[] secret = Files.readAllBytes(Path.of(args[2]));
        int rounds = Integer.parseInt(args[3]);
        Duration t = Duration.ofSeconds(30);
        try (ConnectionManager cm = Plugins.discover().transport("aeron").create(TransportConfig.builder()
                .name("member-" + rank).authSecret(secret).build())) {
            if (rank == 0) {
                System.out.println("leader " + cm.localAddress());
                System.out.flush();
            }
            RankRendezvous.Joined j = rank == 0
                    ? RankRendezvous.lead(cm, "group-test", size, new byte[16], t)
                    : RankRendezvous.join(cm, "group-test", rank, size, args[4], t);
            List<String> addresses = j.addresses();
            try (TransportGroupComm g = TransportGroupComm.join(cm, addresses, rank, 77, 0)) {
                for (int round = 0; round < rounds; round++) {
                    List<long[]> all = g.allgather(values(round, rank), t);
                    for (int k = 0; k < size; k++) {
                        if (!Arrays.equals(all.get(k), values(round, k))) {
                            System.out.println("wrong round " + round + " member " + k);
                            System.exit(3);
                        }
                    }
                }
                System.out.println("ok " + rounds);
                System.out.flush();
                if (rank == size - 1) {
                    System.in.read(); // the last member never calls again: the test kills it here
                    return;
                }
                try {
                    g.allgather(new long[] {rank}, t);
                    System.out.println("last round complete");
                } catch (KvTransferException e) {
                    System.out.println("failed " + e.code() + " " + e.getMessage().replace('\n', ' '));
                }
                System.out.flush();
            }
        }
        System.out.println("exit");
    }
}
