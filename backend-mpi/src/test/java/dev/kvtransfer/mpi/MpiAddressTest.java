package dev.kvtransfer.mpi;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Address forms: full, short, bare rank, another world, a listening process's port (no MPI needed). */
class MpiAddressTest {
    private static final String WORLD = "0123abcd";

    @Test
    void fullAndShortFormsOfThisWorld() {
        assertThat(MpiAddress.parse("3/7@0123abcd", 4, WORLD)).isEqualTo(new MpiAddress(3, 7, null, null));
        assertThat(MpiAddress.parse("3/7", 4, WORLD)).isEqualTo(new MpiAddress(3, 7, null, null));
        assertThat(MpiAddress.parse(" 2 ", 4, WORLD)).isEqualTo(new MpiAddress(2, 0, null, null));
        assertThat(MpiAddress.format(3, 7, WORLD, null)).isEqualTo("3/7@0123abcd");
    }

    @Test
    void anotherWorldKeepsItsIdAndPort() {
        MpiAddress a = MpiAddress.parse("0/2@ffff0000~806092801.0:107100426", 4, WORLD);
        assertThat(a).isEqualTo(new MpiAddress(0, 2, "ffff0000", "806092801.0:107100426"));
        assertThat(MpiAddress.format(0, 2, "ffff0000", "806092801.0:107100426"))
                .isEqualTo("0/2@ffff0000~806092801.0:107100426");
        // a rank beyond this world's size is fine in another world
        assertThat(MpiAddress.parse("9/0@ffff0000", 4, WORLD).rank()).isEqualTo(9);
    }

    @Test
    void malformedAddressesAreRefusedNamingThem() {
        assertThatThrownBy(() -> MpiAddress.parse("4/0", 4, WORLD)).hasMessageContaining("'4/0'")
                .hasMessageContaining("outside MPI_COMM_WORLD (size 4)");
        assertThatThrownBy(() -> MpiAddress.parse("1/-1", 4, WORLD)).hasMessageContaining("negative");
        assertThatThrownBy(() -> MpiAddress.parse("127.0.0.1:4000", 4, WORLD))
                .hasMessageContaining("expected <world rank>/<endpoint>@<world id>");
        assertThatThrownBy(() -> MpiAddress.parse("0/0@nothex!!", 4, WORLD)).hasMessageContaining("8 hex digits");
        String huge = "x".repeat(100_000);
        assertThatThrownBy(() -> MpiAddress.parse(huge, 4, WORLD)).satisfies(e -> assertThat(e.getMessage().length())
                .isLessThan(400));
    }
}
