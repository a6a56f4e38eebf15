package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.w3c.dom.Document;
import picocli.CommandLine;

import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilderFactory;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code kvtransfer bench --report} with the tiny suite ({@code --report-quick}): what the report states and how it
 * is laid out, never how fast anything was.
 */
class BenchReportTest {
    private static final String HISTORY = "## Historical measurements\n\nKept by hand: 1.23 GB/s.\n";

    @Test
    void quickReportStatesTheRunAndPairsEveryFigureWithItsBaseline(@TempDir Path tmp) throws Exception {
        Path docs = Files.createDirectories(tmp.resolve("docs"));
        Files.writeString(docs.resolve("benchmarks.md"), "# Benchmarks\n\nHow to measure.\n\n" + HISTORY);
        Path readme = tmp.resolve("README.md");
        Files.writeString(readme, "# product\n\nintro\n\n" + BenchReport.HEADLINE_BEGIN + "\nstale table\n"
                + BenchReport.HEADLINE_END + "\n\nmore\n");

        // The report states the checkout as it was before it wrote anything (here nothing it writes is tracked).
        String commitBefore = BenchReport.Machine.gitCommit();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code;
        try (PrintStream po = new PrintStream(out, true, StandardCharsets.UTF_8);
             PrintStream pe = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            code = new CommandLine(new BenchCommand(po, pe)).execute("--report=" + docs, "--report-quick",
                    "--readme=" + readme, "--out=" + tmp.resolve("steps"), "--timeout-s=60");
        }
        String stderr = err.toString(StandardCharsets.UTF_8);
        assertThat(code).as("exit code; stderr:%n%s", stderr).isZero();

        String doc = Files.readString(docs.resolve("benchmarks.md"));
        // The hand-written parts are kept, the generated section sits between them, once.
        assertThat(doc).startsWith("# Benchmarks\n\nHow to measure.\n\n" + BenchReport.BEGIN).endsWith(HISTORY);
        assertThat(doc.split(java.util.regex.Pattern.quote(BenchReport.BEGIN), -1)).hasSize(2);
        String section = BenchReport.extract(doc, BenchReport.BEGIN, BenchReport.END);
        assertThat(section).isNotNull();

        // The header: command, commit, date, machine, load before and after.
        assertThat(section).contains("- Command: `kvtransfer bench --report=" + docs + " --report-quick --readme=")
                .containsPattern("- Commit: ([0-9a-f]{12} \\((clean|with uncommitted changes to tracked files)\\)"
                        + "|unknown \\(not run from a git checkout\\))\n")
                .contains("- Commit: " + commitBefore + "\n")
                .containsPattern("- Date: \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC to \\d{4}-\\d\\d-\\d\\d "
                        + "\\d\\d:\\d\\d:\\d\\d UTC \\(\\d+ min \\d+ s\\)\n")
                .contains("- Machine: " + Runtime.getRuntime().availableProcessors() + " cores (")
                .contains(System.getProperty("java.runtime.version"))
                .containsPattern("- Load average \\(1 / 5 / 15 min\\): before \\S+ / \\S+ / \\S+, after \\S+ / \\S+ / "
                        + "\\S+\n")
                .contains("figures mean nothing")
                .contains("### Problems\n\nNone");

        // One command per step, each a bench command line of its own.
        assertThat(section.lines().filter(l -> l.startsWith("Command: `kvtransfer bench --backend="))).hasSize(4);

        // Every row of every table: a figure of ours, a baseline with its figure, and the ratio.
        List<String[]> rows = tableRows(section);
        assertThat(rows).hasSizeGreaterThanOrEqualTo(10);
        for (String[] r : rows) {
            assertThat(r).as("row %s", String.join("|", r)).allSatisfy(c -> assertThat(c.trim()).isNotEmpty());
            if (r.length == 5) { // a step's table: figure, ours, baseline, baseline's figure, ratio
                assertThat(r[1].trim()).as("ours in %s", r[0]).matches("[\\d,.]+ \\([\\d,.]+ – [\\d,.]+\\)");
                assertThat(r[2].trim()).as("baseline of %s", r[0]).matches("raw aeron( round trip)?|memcpy");
                assertThat(r[3].trim()).as("baseline figure of %s", r[0]).matches("[\\d,.]+ \\([\\d,.]+ – [\\d,.]+\\)");
                assertThat(r[4].trim()).as("ratio of %s", r[0]).matches("[\\d.]+( \\([\\d.]+ – [\\d.]+\\))?");
            } else { // the headline: figure, ours, baseline with its figure, ratio
                assertThat(r).hasSize(4);
                assertThat(r[1].trim()).matches("[\\d,.]+ (GB/s|p50 µs)");
                assertThat(r[2].trim()).matches("(raw aeron( round trip)?|memcpy) [\\d,.]+ (GB/s|p50 µs)");
                assertThat(r[3].trim()).matches("[\\d.]+");
            }
        }
        // Ours beside raw Aeron (transport, transceiver, control) and beside memcpy (loopback).
        assertThat(rows).anyMatch(r -> r[2].trim().equals("raw aeron round trip"));
        assertThat(rows).anyMatch(r -> r[0].contains("aeron pull") && r[2].trim().startsWith("raw aeron"));
        assertThat(rows).anyMatch(r -> r[0].contains("loopback") && r[2].trim().startsWith("memcpy"));

        // The plots the section shows exist and are well-formed XML.
        List<String> plots = section.lines().filter(l -> l.startsWith("![")).map(l -> l.substring(l.indexOf("](") + 2,
                l.length() - 1)).toList();
        assertThat(plots).containsExactly("benchmarks/throughput.svg", "benchmarks/latency.svg",
                "benchmarks/ratios.svg");
        DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
        f.setNamespaceAware(true);
        f.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
        f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        for (String p : plots) {
            Document svg = f.newDocumentBuilder().parse(docs.resolve(p).toFile());
            assertThat(svg.getDocumentElement().getLocalName()).isEqualTo("svg");
            assertThat(svg.getElementsByTagNameNS("http://www.w3.org/2000/svg", "rect").getLength())
                    .as("bars in %s", p).isGreaterThan(1);
        }

        // The README's headline block is the report's, the rest of the README untouched.
        String head = BenchReport.extract(section, BenchReport.HEADLINE_BEGIN, BenchReport.HEADLINE_END);
        String readmeText = Files.readString(readme);
        assertThat(readmeText).isEqualTo("# product\n\nintro\n\n" + head + "\n\nmore\n");
        assertThat(head.lines().filter(l -> l.startsWith("| ") && !l.startsWith("| figure")
                && !l.startsWith("| ---"))).hasSize(6);
    }

    @Test
    void theSectionReplacesItselfOrGoesBeforeTheFirstSecondLevelHeading() {
        String section = BenchReport.BEGIN + "\nnew\n" + BenchReport.END;
        assertThat(BenchReport.insert("# B\n\nintro\n\n## old\n", section))
                .isEqualTo("# B\n\nintro\n\n" + section + "\n\n## old\n");
        assertThat(BenchReport.insert("# B\n", section)).isEqualTo("# B\n\n" + section + "\n");
        String once = "# B\n\n" + BenchReport.BEGIN + "\nold\n" + BenchReport.END + "\n\n## h\n";
        assertThat(BenchReport.insert(once, section)).isEqualTo("# B\n\n" + section + "\n\n## h\n");
        assertThatThrownBy(() -> BenchReport.insert("# B\n" + BenchReport.END + "\n", section))
                .isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void theReportRefusesOptionsThatWouldChangeItsSuite(@TempDir Path tmp) {
        StringWriter err = new StringWriter();
        CommandLine cl = new CommandLine(new BenchCommand(new PrintStream(new ByteArrayOutputStream()),
                new PrintStream(new ByteArrayOutputStream())));
        cl.setErr(new PrintWriter(err));
        assertThat(cl.execute("--report=" + tmp, "--backend=ucx")).isNotZero();
        assertThat(err.toString()).contains("--report runs a fixed suite: --backend");
        assertThat(cl.execute("--readme=" + tmp.resolve("README.md"))).isNotZero();
        assertThat(tmp.resolve("benchmarks.md")).doesNotExist();
    }

    /** The body rows of every markdown table in the text (header and separator rows left out), cells trimmed. */
    private static List<String[]> tableRows(String text) {
        List<String[]> out = new ArrayList<>();
        for (String l : text.lines().toList()) {
            if (l.startsWith("| ") && !l.startsWith("| figure") && !l.startsWith("| ---")) {
                String[] cells = l.substring(2, l.length() - 2).split(" \\| ", -1);
                out.add(cells);
            }
        }
        return out;
    }
}
