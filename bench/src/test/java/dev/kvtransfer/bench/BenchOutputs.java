package dev.kvtransfer.bench;

import org.w3c.dom.Document;

import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilderFactory;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * Runs {@code kvtransfer bench} in this JVM and checks what it wrote: every file parses (CSV, JSON, SVG as XML) and
 * the numbers agree with each other (no speed is asserted).
 */
final class BenchOutputs {
    final int exitCode;
    final String stdout;
    final String stderr;
    final List<Map<String, String>> runs;
    final List<Map<String, String>> summary;
    final Map<String, Object> json;
    final Document svg;

    private BenchOutputs(int exitCode, String stdout, String stderr, List<Map<String, String>> runs,
            List<Map<String, String>> summary, Map<String, Object> json, Document svg) {
        this.exitCode = exitCode;
        this.stdout = stdout;
        this.stderr = stderr;
        this.runs = runs;
        this.summary = summary;
        this.json = json;
        this.svg = svg;
    }

    @SuppressWarnings("unchecked")
    static BenchOutputs run(Path out, String... args) throws Exception {
        ByteArrayOutputStream o = new ByteArrayOutputStream();
        ByteArrayOutputStream e = new ByteArrayOutputStream();
        List<String> all = new ArrayList<>(List.of(args));
        all.add("--out=" + out);
        int code;
        try (PrintStream po = new PrintStream(o, true, StandardCharsets.UTF_8);
             PrintStream pe = new PrintStream(e, true, StandardCharsets.UTF_8)) {
            code = new picocli.CommandLine(new BenchCommand(po, pe)).execute(all.toArray(new String[0]));
        }
        String stdout = o.toString(StandardCharsets.UTF_8);
        String stderr = e.toString(StandardCharsets.UTF_8);
        assertThat(out.resolve("runs.csv")).as("runs.csv; stderr: %s", stderr).exists();
        List<Map<String, String>> runs = csv(out.resolve("runs.csv"), Reports.RUN_COLUMNS);
        List<Map<String, String>> summary = csv(out.resolve("summary.csv"), Reports.SUMMARY_COLUMNS);
        Map<String, Object> json = (Map<String, Object>) Json.parse(Files.readString(out.resolve("bench.json")));
        DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
        f.setNamespaceAware(true);
        f.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
        f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        Document svg = f.newDocumentBuilder().parse(out.resolve("bench.svg").toFile());
        return new BenchOutputs(code, stdout, stderr, runs, summary, json, svg);
    }

    /** Parses a CSV file with the given header (quoted fields with doubled quotes). */
    static List<Map<String, String>> csv(Path file, List<String> columns) throws Exception {
        List<String> lines = Files.readAllLines(file);
        assertThat(lines).isNotEmpty();
        assertThat(fields(lines.get(0))).as("header of %s", file).isEqualTo(columns);
        List<Map<String, String>> rows = new ArrayList<>();
        for (int n = 1; n < lines.size(); n++) {
            List<String> f = fields(lines.get(n));
            assertThat(f).as("%s line %d: %s", file, n + 1, lines.get(n)).hasSize(columns.size());
            Map<String, String> row = new HashMap<>();
            for (int i = 0; i < columns.size(); i++) {
                row.put(columns.get(i), f.get(i));
            }
            rows.add(row);
        }
        return rows;
    }

    static List<String> fields(String line) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        boolean quoted = false;
        for (int i = 0; i < line.length(); i++) {
            char c = line.charAt(i);
            if (quoted) {
                if (c == '"' && i + 1 < line.length() && line.charAt(i + 1) == '"') {
                    cur.append('"');
                    i++;
                } else if (c == '"') {
                    quoted = false;
                } else {
                    cur.append(c);
                }
            } else if (c == '"') {
                quoted = true;
            } else if (c == ',') {
                out.add(cur.toString());
                cur.setLength(0);
            } else {
                cur.append(c);
            }
        }
        assertThat(quoted).as("unterminated quote in %s", line).isFalse();
        out.add(cur.toString());
        return out;
    }

    static double num(Map<String, String> row, String key) {
        String v = row.get(key);
        return v == null || v.isEmpty() ? Double.NaN : Double.parseDouble(v);
    }

    /** The consistency rules every output must satisfy, whatever the speed. */
    @SuppressWarnings("unchecked")
    void checkConsistent(int repeat) {
        assertThat(runs).isNotEmpty();
        for (Map<String, String> r : runs) {
            double bytes = num(r, "bytes");
            double nanos = num(r, "nanos");
            double ops = num(r, "ops");
            assertThat(nanos).as("nanos of %s", r).isPositive();
            assertThat(ops).as("ops of %s", r).isPositive();
            assertThat(num(r, "gbps")).as("gbps = bytes / nanos in %s", r)
                    .isCloseTo(bytes / nanos, within(bytes / nanos * 1e-4 + 1e-9));
            assertThat(num(r, "ops_per_s")).as("ops_per_s in %s", r)
                    .isCloseTo(ops / (nanos / 1e9), within(ops / (nanos / 1e9) * 1e-4 + 1e-9));
            if (r.get("level").equals("transport") && !r.get("impl").equals("memcpy")) {
                assertThat(bytes).as("bytes = ops x size in %s", r).isEqualTo(ops * num(r, "size_bytes"));
            }
            double p50 = num(r, "p50_us");
            double p99 = num(r, "p99_us");
            double p999 = num(r, "p999_us");
            double max = num(r, "max_us");
            if (!Double.isNaN(p99)) {
                assertThat(p50).as("p50 <= p99 in %s", r).isLessThanOrEqualTo(p99);
                assertThat(p99).as("p99 <= p99.9 in %s", r).isLessThanOrEqualTo(p999);
                assertThat(p999).as("p99.9 <= max in %s", r).isLessThanOrEqualTo(max * 1.001);
            }
            if (r.get("impl").equals("ours") && HeapMeter.supported()) {
                assertThat(num(r, "heap_bytes_per_op")).as("heap per op of %s", r).isGreaterThanOrEqualTo(0);
            }
            assertThat(num(r, "mismatches")).as("mismatches in %s", r).isZero();
            assertThat(num(r, "failures")).as("failures in %s", r).isZero();
            assertThat(num(r, "repeat")).isBetween(1.0, (double) repeat);
        }
        for (Map<String, String> s : summary) {
            assertThat(num(s, "runs")).as("repeats of %s", s).isEqualTo(repeat);
            assertThat(num(s, "gbps_min")).isLessThanOrEqualTo(num(s, "gbps_median"));
            assertThat(num(s, "gbps_median")).isLessThanOrEqualTo(num(s, "gbps_max"));
            if (!Double.isNaN(num(s, "ratio_to_raw_median"))) {
                assertThat(num(s, "ratio_to_raw_min")).isLessThanOrEqualTo(num(s, "ratio_to_raw_median"));
                assertThat(num(s, "ratio_to_raw_median")).isLessThanOrEqualTo(num(s, "ratio_to_raw_max"));
            }
        }
        List<Object> jsonRuns = (List<Object>) json.get("runs");
        List<Object> jsonSummary = (List<Object>) json.get("summary");
        assertThat(jsonRuns).hasSize(runs.size());
        assertThat(jsonSummary).hasSize(summary.size());
        for (int i = 0; i < runs.size(); i++) {
            Map<String, Object> j = (Map<String, Object>) jsonRuns.get(i);
            Map<String, String> c = runs.get(i);
            assertThat(j.get("level")).isEqualTo(c.get("level"));
            assertThat(j.get("impl")).isEqualTo(c.get("impl"));
            assertThat((Double) j.get("bytes")).isEqualTo(num(c, "bytes"));
            assertThat((Double) j.get("nanos")).isEqualTo(num(c, "nanos"));
        }
        Map<String, Object> info = (Map<String, Object>) json.get("run");
        assertThat((Double) info.get("repeat")).isEqualTo(repeat);
        assertThat(svg.getDocumentElement().getLocalName()).isEqualTo("svg");
        assertThat(svg.getDocumentElement().getNamespaceURI()).isEqualTo("http://www.w3.org/2000/svg");
        assertThat(svg.getElementsByTagNameNS("http://www.w3.org/2000/svg", "polyline").getLength())
                .as("one line per series and panel").isGreaterThanOrEqualTo(3);
        assertThat(svgText()).as("panels").contains("GB/s (log scale)", "p50 latency", "p99 latency");
        for (Map<String, String> s : summary) {
            String label = s.get("level") + " " + s.get("backend") + " " + s.get("impl");
            assertThat(svgText()).as("legend names %s", label).contains(label);
        }
    }

    String svgText() {
        return svg.getDocumentElement().getTextContent();
    }

    List<Map<String, String>> runs(String level, String impl) {
        return runs.stream().filter(r -> r.get("level").equals(level) && r.get("impl").equals(impl)).toList();
    }
}
