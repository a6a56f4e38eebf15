package dev.kvtransfer.testkit;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Keeps {@code SPEC.md} and the suites in step, by reflection over the suite classes: every clause has exactly one
 * rule, every rule exactly one clause, the rule's name carries its clause's number, names are unique across the
 * suites, and the README names no rule that does not exist (nor one of the retired {@code required_NN_} names).
 */
class SpecConformanceTest {
    /** Every conformance suite of the testkit. A new suite must be listed here, or its rules are unchecked. */
    static final List<Class<?>> SUITES = List.of(TransportConformanceTest.class, TransceiverConformanceTest.class,
            TransceiverCrossProcessTest.class, TransceiverFaultConformanceTest.class, FormatterConformanceTest.class,
            MemoryProviderConformanceTest.class);

    static final Pattern RULE = Pattern.compile("(required|optional)_spec(\\d+)_(\\d+)_[A-Za-z0-9]+");
    private static final Pattern CLAUSE = Pattern.compile("^- \\*\\*(\\d+)\\.(\\d+)\\*\\* `([A-Za-z0-9_]+)` — (.+)$");
    private static final Pattern RETIRED = Pattern.compile("\\b(required|optional|fault)_\\d+[a-z]?\\b");

    private static Map<String, String> clauseToName;
    private static Map<String, String> clauseText;

    @BeforeAll
    static void readSpec() throws IOException {
        clauseToName = new LinkedHashMap<>();
        clauseText = new LinkedHashMap<>();
        for (String line : Files.readAllLines(moduleFile("SPEC.md"))) {
            Matcher m = CLAUSE.matcher(line);
            if (m.matches()) {
                String clause = m.group(1) + "." + m.group(2);
                assertThat(clauseToName.put(clause, m.group(3))).as("clause %s is written once in SPEC.md", clause)
                        .isNull();
                clauseText.put(clause, m.group(4));
            }
        }
        assertThat(clauseToName).as("clauses parsed from SPEC.md").hasSizeGreaterThan(50);
    }

    static Path moduleFile(String name) {
        // Surefire runs in the module's directory; an IDE may run in the repository's root.
        Path here = Path.of(name);
        return Files.exists(here) ? here : Path.of("testkit", name);
    }

    /** Rule methods by clause, over the suites and their superclasses (a suite may be split into families). */
    static Map<String, List<Method>> rules() {
        Map<String, List<Method>> out = new TreeMap<>();
        Set<Class<?>> seen = new java.util.HashSet<>();
        for (Class<?> suite : SUITES) {
            for (Class<?> c = suite; c != null && c != Object.class; c = c.getSuperclass()) {
                if (!seen.add(c)) {
                    continue;
                }
                for (Method m : c.getDeclaredMethods()) {
                    Matcher r = RULE.matcher(m.getName());
                    if (r.matches()) {
                        out.computeIfAbsent(Integer.parseInt(r.group(2)) + "." + Integer.parseInt(r.group(3)),
                                k -> new ArrayList<>()).add(m);
                    }
                }
            }
        }
        return out;
    }

    @Test
    void everyClauseHasExactlyOneRuleNamedAfterIt() {
        Map<String, List<Method>> rules = rules();
        List<String> problems = new ArrayList<>();
        clauseToName.forEach((clause, name) -> {
            List<Method> ms = rules.getOrDefault(clause, List.of());
            if (ms.isEmpty()) {
                problems.add("clause " + clause + " (" + name + ") has no rule in " + SUITES);
            } else if (ms.size() > 1) {
                problems.add("clause " + clause + " has " + ms.size() + " rules: " + ms);
            } else if (!ms.get(0).getName().equals(name)) {
                problems.add("clause " + clause + " names " + name + " but its rule is " + ms.get(0).getName());
            }
        });
        assertThat(problems).isEmpty();
    }

    @Test
    void everyRuleHasAClause() {
        List<String> orphans = new ArrayList<>();
        rules().forEach((clause, ms) -> {
            if (!clauseToName.containsKey(clause)) {
                ms.forEach(m -> orphans.add(m.getDeclaringClass().getSimpleName() + "." + m.getName()));
            }
        });
        assertThat(orphans).as("rules without a clause in SPEC.md").isEmpty();
    }

    @Test
    void everyTestOfASuiteIsARuleAndRulesAreVisibleToSubclasses() {
        List<String> problems = new ArrayList<>();
        for (List<Method> ms : rules().values()) {
            for (Method m : ms) {
                int mod = m.getModifiers();
                if (!Modifier.isPublic(mod) && !Modifier.isProtected(mod)) {
                    problems.add(m + " is neither public nor protected");
                }
                boolean annotated = m.isAnnotationPresent(Test.class) || m.isAnnotationPresent(TestFactory.class);
                String clause = clause(m.getName());
                // An opt-in rule is run by the backend's subclass overriding it with @Test; its clause says so.
                if (!annotated && !clauseText.getOrDefault(clause, "").contains("overrides it with `@Test`")) {
                    problems.add(m + " is not a @Test and its clause does not make it opt-in");
                }
            }
        }
        for (Class<?> suite : SUITES) {
            for (Class<?> c = suite; c != null && c != Object.class; c = c.getSuperclass()) {
                for (Method m : c.getDeclaredMethods()) {
                    boolean test = m.isAnnotationPresent(Test.class) || m.isAnnotationPresent(TestFactory.class);
                    if (test && !RULE.matcher(m.getName()).matches()) {
                        problems.add(c.getSimpleName() + "." + m.getName() + " is a test without a clause number");
                    }
                }
            }
        }
        assertThat(problems).isEmpty();
    }

    @Test
    void theReadmeNamesOnlyRulesThatExist() throws IOException {
        String readme = Files.readString(moduleFile("README.md"));
        Set<String> names = new TreeSet<>();
        rules().values().forEach(ms -> ms.forEach(m -> names.add(m.getName())));
        Set<String> unknown = new TreeSet<>();
        Matcher m = RULE.matcher(readme);
        while (m.find()) {
            if (!names.contains(m.group())) {
                unknown.add(m.group());
            }
        }
        assertThat(unknown).as("rule names in README.md that no suite has").isEmpty();
        assertThat(RETIRED.matcher(readme).results().map(MatchResult -> MatchResult.group()).toList())
                .as("retired rule names in README.md").isEmpty();
    }

    private static String clause(String ruleName) {
        Matcher r = RULE.matcher(ruleName);
        return r.matches() ? Integer.parseInt(r.group(2)) + "." + Integer.parseInt(r.group(3)) : "";
    }
}
