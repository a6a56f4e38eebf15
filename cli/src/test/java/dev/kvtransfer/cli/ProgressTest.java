package dev.kvtransfer.cli;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Progress: a bar redrawn in place on a terminal, spaced plain lines elsewhere, nothing for short work. */
class ProgressTest {
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    private final PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
    private final AtomicLong now = new AtomicLong();

    private String text() {
        return bytes.toString(StandardCharsets.UTF_8);
    }

    @Test
    void onATerminalTheBarIsRedrawnInPlaceAtMostTenTimesASecondAndEndsWithANewline() {
        Progress p = new Progress("requests", 4, out, true, 5_000_000_000L, now::get);
        p.step();
        assertThat(text()).isEqualTo("\r[#######                       ] 1/4 requests  0.0 s");
        now.addAndGet(50_000_000L);
        p.step(); // 50 ms later: not redrawn
        assertThat(text()).doesNotContain("2/4");
        now.addAndGet(60_000_000L);
        p.step();
        assertThat(text()).endsWith("\r[######################        ] 3/4 requests  0.1 s");
        p.step(); // the last one is always drawn
        assertThat(text()).endsWith("] 4/4 requests  0.1 s");
        p.done();
        p.done(); // idempotent
        assertThat(text()).endsWith("\r[##############################] 4/4 requests  0.1 s" + System.lineSeparator());
        assertThat(p.completed()).isEqualTo(4);
    }

    @Test
    void elsewherePlainLinesAreSpacedAndShortWorkPrintsNothing() {
        Progress quick = new Progress("requests", 3, out, false, 5_000_000_000L, now::get);
        quick.step(3);
        quick.done();
        assertThat(text()).isEmpty();

        Progress slow = new Progress("requests", 10, out, false, 5_000_000_000L, now::get);
        now.addAndGet(6_000_000_000L);
        slow.step(2);
        now.addAndGet(1_000_000_000L);
        slow.step(3); // only 1 s after the last line
        now.addAndGet(5_000_000_000L);
        slow.step(5);
        slow.done();
        assertThat(text().lines()).containsExactly(
                "kvtransfer: requests 2/10 (20%) after 6.0 s",
                "kvtransfer: requests 10/10 (100%) after 12.0 s",
                "kvtransfer: requests 10/10 (100%) after 12.0 s");
    }

    @Test
    void countsAreBoundedAndChecked() {
        Progress p = new Progress("x", 2, out, false, 0, now::get);
        p.step(5);
        assertThat(p.completed()).isEqualTo(2);
        assertThatThrownBy(() -> p.step(-1)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new Progress("x", -1, out, false, 0, now::get))
                .isInstanceOf(IllegalArgumentException.class);
        Progress none = new Progress("x", 0, out, true, 0, now::get);
        none.done();
        assertThat(text()).endsWith("] 0/0 x  0.0 s" + System.lineSeparator());
    }
}
