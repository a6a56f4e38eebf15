package dev.kvtransfer.cli.docs;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Every relative link in every Markdown file of the repository (READMEs, docs/, SPEC.md, PROTOCOL.md, ...) leads to
 * a file that exists, and its {@code #anchor}, if any, to a heading of that file (GitHub's slugs). Links to other
 * sites are not followed: the build runs offline.
 */
class DocLinksTest {
    private static final Path ROOT = RepositoryRoot.find();
    /** {@code [text](target)} and {@code ![alt](target)}; the target ends at whitespace or ')'. */
    private static final Pattern INLINE = Pattern.compile("!?\\[[^\\]]*\\]\\(\\s*<?([^)\\s>]+)>?(?:\\s+\"[^\"]*\")?\\s*\\)");
    /** {@code [label]: target} with at most a title after it (a line like {@code [load 8]: 10 %} is prose). */
    private static final Pattern REFERENCE = Pattern.compile(
            "^\\s{0,3}\\[[^\\]]+\\]:\\s+<?([^\\s>]+)>?(?:\\s+(?:\"[^\"]*\"|'[^']*'|\\([^)]*\\)))?\\s*$");
    private static final Pattern HEADING = Pattern.compile("^#{1,6}\\s+(.*?)\\s*#*\\s*$");
    private static final Pattern HTML_ANCHOR = Pattern.compile("<a\\s+(?:name|id)=\"([^\"]+)\"");
    private static final Pattern INLINE_CODE = Pattern.compile("`+[^`]*`+");

    private final Map<Path, Set<String>> anchors = new HashMap<>();

    @Test
    void everyRelativeLinkLeadsSomewhere() throws IOException {
        List<Path> pages = markdownFiles();
        assertThat(pages).as("Markdown files under " + ROOT).isNotEmpty();
        List<String> dead = new ArrayList<>();
        for (Path page : pages) {
            List<String> lines = Files.readAllLines(page, StandardCharsets.UTF_8);
            boolean fenced = false;
            for (int i = 0; i < lines.size(); i++) {
                String line = lines.get(i);
                if (line.stripLeading().startsWith("```") || line.stripLeading().startsWith("~~~")) {
                    fenced = !fenced;
                    continue;
                }
                if (fenced || line.startsWith("    ") || line.startsWith("\t")) {
                    continue;
                }
                String text = INLINE_CODE.matcher(line).replaceAll("");
                List<String> targets = new ArrayList<>();
                Matcher m = INLINE.matcher(text);
                while (m.find()) {
                    targets.add(m.group(1));
                }
                Matcher r = REFERENCE.matcher(text);
                if (r.matches()) {
                    targets.add(r.group(1));
                }
                for (String target : targets) {
                    String why = check(page, target);
                    if (why != null) {
                        dead.add(ROOT.relativize(page) + ":" + (i + 1) + ": " + target + " (" + why + ")");
                    }
                }
            }
        }
        assertThat(dead).as("dead relative links in the repository's Markdown").isEmpty();
    }

    @Test
    void slugsFollowGitHub() {
        assertThat(slug("Transceiver (`kvtransfer.*`)")).isEqualTo("transceiver-kvtransfer");
        assertThat(slug("Push and layer-wise: what moves when")).isEqualTo("push-and-layer-wise-what-moves-when");
        assertThat(slug("`kvtransfer serve` and `kvtransfer route` — the standalone deployment"))
                .isEqualTo("kvtransfer-serve-and-kvtransfer-route--the-standalone-deployment");
    }

    /** @return null when the link is fine, else why not */
    private String check(Path page, String target) throws IOException {
        if (target.matches("^[a-zA-Z][a-zA-Z0-9+.-]*:.*") || target.startsWith("//")) {
            return null; // another site, mailto:, ...: not followed offline
        }
        String path = target;
        String anchor = null;
        int hash = target.indexOf('#');
        if (hash >= 0) {
            path = target.substring(0, hash);
            anchor = target.substring(hash + 1);
        }
        int query = path.indexOf('?');
        if (query >= 0) {
            path = path.substring(0, query);
        }
        path = java.net.URLDecoder.decode(path.replace("+", "%2B"), StandardCharsets.UTF_8);
        Path file;
        if (path.isEmpty()) {
            file = page;
        } else if (path.startsWith("/")) {
            file = ROOT.resolve(path.substring(1)).normalize();
        } else {
            file = page.getParent().resolve(path).normalize();
        }
        if (!file.startsWith(ROOT)) {
            return "outside the repository";
        }
        if (!Files.exists(file)) {
            return "no such file";
        }
        if (anchor == null || anchor.isEmpty() || !file.toString().endsWith(".md")) {
            return null;
        }
        if (!anchorsOf(file).contains(anchor.toLowerCase(Locale.ROOT))) {
            return "no heading #" + anchor + " in " + ROOT.relativize(file);
        }
        return null;
    }

    private Set<String> anchorsOf(Path file) throws IOException {
        Set<String> known = anchors.get(file);
        if (known != null) {
            return known;
        }
        known = new HashSet<>();
        Map<String, Integer> seen = new HashMap<>();
        boolean fenced = false;
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            if (line.stripLeading().startsWith("```") || line.stripLeading().startsWith("~~~")) {
                fenced = !fenced;
                continue;
            }
            if (fenced) {
                continue;
            }
            Matcher h = HEADING.matcher(line);
            if (h.matches()) {
                String s = slug(h.group(1));
                int n = seen.merge(s, 1, Integer::sum);
                known.add(n == 1 ? s : s + "-" + (n - 1));
            }
            Matcher a = HTML_ANCHOR.matcher(line);
            while (a.find()) {
                known.add(a.group(1).toLowerCase(Locale.ROOT));
            }
        }
        anchors.put(file, known);
        return known;
    }

    /** GitHub's heading slug: lower case, punctuation dropped (but '-' and '_'), spaces to '-'. */
    static String slug(String heading) {
        String s = heading.replaceAll("\\[([^\\]]*)\\]\\([^)]*\\)", "$1"); // a link in a heading: its text
        s = s.replaceAll("<[^>]+>", "").toLowerCase(Locale.ROOT);
        StringBuilder b = new StringBuilder();
        s.codePoints().forEach(c -> {
            if (Character.isLetterOrDigit(c) || c == '-' || c == '_') {
                b.appendCodePoint(c);
            } else if (c == ' ') {
                b.append('-');
            }
        });
        return b.toString();
    }

    private static List<Path> markdownFiles() throws IOException {
        try (Stream<Path> s = Files.walk(ROOT)) {
            return s.filter(p -> p.toString().endsWith(".md"))
                    .filter(p -> {
                        String rel = ROOT.relativize(p).toString().replace('\\', '/');
                        return !rel.startsWith(".git/") && !rel.contains("/target/") && !rel.startsWith("target/")
                                && !rel.contains("node_modules/");
                    })
                    .sorted().collect(Collectors.toList());
        }
    }
}
