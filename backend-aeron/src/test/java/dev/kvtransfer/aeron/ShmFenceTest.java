package dev.kvtransfer.aeron;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The revocation words: a writer enters only under the generation it was given and only until revocation; the owner
 * sees the pieces in flight; a reused slot refuses the old generation; a file with another token (not this host's
 * memory) or no file is not opened.
 */
class ShmFenceTest {
    @Test
    void aSlotAdmitsItsGenerationUntilRevokedAndRefusesItAfterReuse() throws Exception {
        try (ShmFence owner = ShmFence.create()) {
            ShmFence writer = ShmFence.open(owner.path.toString(), owner.token);
            assertThat(writer).as("same file, same token").isNotNull();
            try {
                int slot = owner.allocate();
                int gen = owner.generation(slot);
                assertThat(writer.enter(slot, gen)).isTrue();
                assertThat(writer.enter(slot, gen)).isTrue();
                assertThat(owner.inFlight(slot)).isEqualTo(2);
                assertThat(writer.enter(slot, gen + 1)).as("another generation").isFalse();
                owner.revoke(slot);
                assertThat(writer.enter(slot, gen)).as("revoked").isFalse();
                assertThat(owner.inFlight(slot)).as("pieces already in flight finish").isEqualTo(2);
                writer.exit(slot);
                writer.exit(slot);
                assertThat(owner.inFlight(slot)).isZero();
                owner.release(slot);
                // Handed out again (possibly to another writer): the old generation stays refused.
                int again = -1;
                for (int i = 0; i < ShmFence.SLOTS && again != slot; i++) {
                    again = owner.allocate();
                }
                assertThat(again).isEqualTo(slot);
                assertThat(writer.enter(slot, gen)).isFalse();
                assertThat(writer.enter(slot, owner.generation(slot))).isTrue();
                writer.exit(slot);
            } finally {
                writer.close();
            }
        }
    }

    /** A slot handed out in a grant's key: its writer writes itself in; a fresh hand-out forgets the last writer. */
    @Test
    void aWriterClaimsItsSlotAndTheOwnerSeesWhoAndAReuseClearsIt() throws Exception {
        try (ShmFence owner = ShmFence.create()) {
            ShmFence writer = ShmFence.open(owner.path.toString(), owner.token);
            try {
                int slot = owner.allocate();
                assertThat(owner.writerPid(slot)).isZero();
                assertThat(owner.writerPidNamespace(slot)).isEqualTo(-1);
                writer.claim(slot, 4321, 99);
                assertThat(owner.writerPid(slot)).isEqualTo(4321);
                assertThat(owner.writerPidNamespace(slot)).isEqualTo(99);
                assertThat(owner.writerPid(slot + 1)).as("its neighbour untouched").isZero();
                owner.revoke(slot);
                owner.release(slot);
                int again = -1;
                for (int i = 0; i < ShmFence.SLOTS && again != slot; i++) {
                    again = owner.allocate();
                }
                assertThat(owner.writerPid(slot)).as("handed out again: no writer yet").isZero();
            } finally {
                writer.close();
            }
        }
    }

    @Test
    void anotherTokenOrNoFileIsNotThisHostsFence() throws Exception {
        try (ShmFence owner = ShmFence.create()) {
            byte[] other = owner.token.clone();
            other[0] ^= 1;
            assertThat(ShmFence.open(owner.path.toString(), other)).isNull();
            assertThat(ShmFence.open(owner.path + "-missing", owner.token)).isNull();
            assertThat(Files.exists(owner.path)).isTrue();
            owner.close();
            assertThat(Files.exists(owner.path)).as("the owner deletes its fence").isFalse();
        }
    }

    @Test
    void allSlotsInUseIsSaidNotThrown() throws Exception {
        try (ShmFence owner = ShmFence.create()) {
            for (int i = 0; i < ShmFence.SLOTS; i++) {
                assertThat(owner.allocate()).isEqualTo(i);
            }
            assertThat(owner.allocate()).isEqualTo(-1);
        }
    }
}
