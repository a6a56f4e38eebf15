package dev.kvtransfer.soak;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.kvtransfer.soak.Soak.FaultKind;
import dev.kvtransfer.soak.Soak.Injection;
import dev.kvtransfer.soak.Soak.Req;
import dev.kvtransfer.soak.Soak.Side;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * What a soak did, from its parent's records: totals, failures by cause and by fault, times to error, hangs,
 * and each process's heap, descriptors and threads; written as {@code report.md} and {@code report.json}.
 * Every failure is attributed to the latest fault whose window overlaps the request (for a kill: only requests
 * touching the killed process); a failure with none is "unexplained".
 */
public final class SoakReport {
    private static final int LIST_MAX = 30;

    /** One failed side of a request. */
    public record Failure(long requestId, String side, String process, String status, String code,
                          long errorRequestId, String message, String fault, long timeToErrorMs) {
        /** @return whether the error carries an ErrorCode and names its own request */
        public boolean named() {
            return code != null && !code.equals("NONE") && errorRequestId == requestId;
        }
    }

    /** A request side that did not end within its deadline plus the grace. */
    public record Hang(long requestId, String side, String process, long startedAtMs, boolean endedLater,
                       String fault) {
    }

    private final SoakOptions o;
    private final Map<String, Object> json = new LinkedHashMap<>();
    private long issued;
    private long served;
    private long bytesVerified;
    private final Map<String, Integer> genFailures = new TreeMap<>();
    private final Map<String, Integer> ctxFailures = new TreeMap<>();
    private final List<Failure> failures = new ArrayList<>();
    private final List<Failure> badData = new ArrayList<>();
    private final List<Hang> hangs = new ArrayList<>();
    private final Map<FaultKind, List<Long>> tte = new EnumMap<>(FaultKind.class);
    private final Map<FaultKind, Map<String, Integer>> byFault = new EnumMap<>(FaultKind.class);
    private long lostWithKilled;
    private long refused;
    private long cancelsSent;
    private long cancelsAccepted;
    private final StringBuilder md = new StringBuilder();
    private final StringBuilder csv = new StringBuilder("id,context,generation,prompt,ctxStartMs,ctxEndMs,ctxStatus,"
            + "ctxCode,genStartMs,genEndMs,genStatus,genCode,cancelSentMs,hung,fault\n");

    SoakReport(SoakOptions o, Soak s) {
        this.o = o;
        synchronized (s) {
            collect(s);
        }
    }

    private void collect(Soak s) {
        for (Req r : s.reqs.values()) {
            issued++;
            if (r.cancelSentNanos >= 0) {
                cancelsSent++;
                cancelsAccepted += r.cancelAccepted ? 1 : 0;
            }
            if ("OK".equals(r.genSide.status)) {
                served++;
                bytesVerified += r.genSide.bytes;
            }
            side(s, r, r.genSide, "generation", r.gen);
            side(s, r, r.ctxSide, "context", r.ctx);
            Injection in = attribute(s, r, Math.max(r.genSide.endNanos, r.ctxSide.endNanos));
            csv.append(r.id).append(',').append(r.ctx.name()).append(',').append(r.gen.name()).append(',')
                    .append(r.prompt).append(',').append(at(s, r.ctxSide.startNanos)).append(',')
                    .append(at(s, r.ctxSide.endNanos)).append(',').append(r.ctxSide.status).append(',')
                    .append(r.ctxSide.code).append(',').append(at(s, r.genSide.startNanos)).append(',')
                    .append(at(s, r.genSide.endNanos)).append(',').append(r.genSide.status).append(',')
                    .append(r.genSide.code).append(',').append(at(s, r.cancelSentNanos)).append(',')
                    .append(r.ctxSide.hung || r.genSide.hung).append(',').append(in == null ? "" : in.kind)
                    .append('\n');
        }
        json.put("options", Map.of("backend", o.backend(), "durationS", o.duration().toSeconds(), "phaseS",
                o.phase().toSeconds(), "inflight", o.inflight(), "seed", o.seed(), "requestTimeoutMs",
                o.requestTimeout().toMillis(), "hangBoundMs", o.hangBound().toMillis(), "maxBlocks", o.maxBlocks(),
                "contextSpec", Soak.CTX_SPEC, "generationSpec", Soak.GEN_SPEC));
        Map<String, Object> totals = new LinkedHashMap<>();
        totals.put("issued", issued);
        totals.put("served", served);
        totals.put("bytesVerified", bytesVerified);
        totals.put("generationFailedByCode", genFailures);
        totals.put("contextFailedByCode", ctxFailures);
        totals.put("verificationFailures", badData.size());
        totals.put("hangs", hangs.size());
        totals.put("unnamedFailures", unnamed().size());
        totals.put("unexplainedFailures", unexplained().size());
        totals.put("lostWithKilledProcess", lostWithKilled);
        totals.put("refusedNoFreeBlocks", refused);
        totals.put("cancelsSent", cancelsSent);
        totals.put("cancelsAccepted", cancelsAccepted);
        totals.put("runMs", s.endNanos > 0 ? TimeUnit.NANOSECONDS.toMillis(s.endNanos - s.t0) : -1);
        json.put("totals", totals);
        json.put("faults", faults(s));
        json.put("kills", kills(s));
        json.put("processes", processes(s));
        json.put("faultHitsPerIncarnation", new TreeMap<>(s.hits));
        json.put("hangList", hangs.stream().limit(LIST_MAX).toList());
        json.put("verificationFailureList", badData.stream().limit(LIST_MAX).toList());
        json.put("unnamedFailureList", unnamed().stream().limit(LIST_MAX).toList());
        json.put("unexplainedFailureList", unexplained().stream().limit(LIST_MAX).toList());
        json.put("unexpectedExits", List.copyOf(s.unexpectedExits));
        json.put("backgroundErrors", List.copyOf(s.backgroundErrors));
        markdown(s);
    }

    private static String at(Soak s, long nanos) {
        return nanos < 0 ? "" : Long.toString(s.ms(nanos));
    }

    private void side(Soak s, Req r, Side d, String name, ChildProc proc) {
        long start = r.ctxSide.startNanos;
        if (d.hung) {
            Injection in = attribute(s, r, d.endNanos >= 0 ? d.endNanos : s.endNanos);
            hangs.add(new Hang(r.id, name, proc.name(), s.ms(d.startNanos), d.endNanos >= 0,
                    in == null ? "none" : in.kind.name()));
        }
        if (d.status == null) {
            return;
        }
        switch (d.status) {
            case "LOST" -> lostWithKilled += proc.killed ? 1 : 0;
            case "REFUSED" -> refused++;
            case "FAIL", "BADDATA" -> {
                Injection in = attribute(s, r, d.endNanos);
                long ref = in == null ? start : reference(r, in);
                long ms = TimeUnit.NANOSECONDS.toMillis(d.endNanos - ref);
                Failure f = new Failure(r.id, name, proc.name(), d.status, d.code, d.errorRequestId, d.message,
                        in == null ? "none" : in.kind.name(), ms);
                if (d.status.equals("BADDATA")) {
                    badData.add(f);
                    return;
                }
                if (d.code != null && d.code.equals("REFUSED")) {
                    refused++;
                    return;
                }
                failures.add(f);
                (name.equals("generation") ? genFailures : ctxFailures).merge(String.valueOf(d.code), 1,
                        Integer::sum);
                if (in != null) {
                    tte.computeIfAbsent(in.kind, k -> new ArrayList<>()).add(ms);
                    byFault.computeIfAbsent(in.kind, k -> new TreeMap<>()).merge(name + " " + d.code, 1,
                            Integer::sum);
                }
            }
            default -> {
                // OK, NOT_SENT
            }
        }
    }

    /**
     * The fault a failure is put down to: the kill of a process the request touched; else its cancel; else the
     * earliest transport fault whose window overlaps the request's life (a fault hits the first messages after it
     * is armed, so the earliest one is the likely cause).
     */
    private static Injection attribute(Soak s, Req r, long end) {
        Injection kill = null;
        Injection cancel = null;
        Injection earliest = null;
        for (Injection in : s.injections) {
            switch (in.kind) {
                case KILL_CONTEXT, KILL_GENERATION -> {
                    if (in.victim != null && (r.ctx == in.victim || r.gen == in.victim) && in.killNanos <= end) {
                        kill = in;
                    }
                }
                case CANCEL_STORM -> {
                    if (r.cancelSentNanos >= 0 && in.atNanos <= r.cancelSentNanos) {
                        cancel = in;
                    }
                }
                default -> {
                    if (earliest == null && in.atNanos <= end && in.windowEndNanos >= r.ctxSide.startNanos) {
                        earliest = in;
                    }
                }
            }
        }
        return kill != null ? kill : cancel != null ? cancel : earliest;
    }

    private static long reference(Req r, Injection in) {
        return switch (in.kind) {
            case KILL_CONTEXT, KILL_GENERATION -> in.killNanos;
            case CANCEL_STORM -> r.cancelSentNanos;
            default -> Math.max(in.atNanos, r.ctxSide.startNanos);
        };
    }

    private Map<String, Object> faults(Soak s) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (FaultKind k : FaultKind.values()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("phases", s.armed.getOrDefault(k, 0));
            m.put("failuresByCode", byFault.getOrDefault(k, Map.of()));
            List<Long> t = new ArrayList<>(tte.getOrDefault(k, List.of()));
            Collections.sort(t);
            m.put("timeToErrorMs", t.isEmpty() ? Map.of() : Map.of("min", t.get(0), "median", t.get(t.size() / 2),
                    "max", t.get(t.size() - 1), "count", t.size()));
            out.put(k.name(), m);
        }
        Map<String, Integer> hits = new TreeMap<>();
        for (String v : s.hits.values()) {
            for (String kv : v.split(",")) {
                String[] p = kv.split(":");
                if (p.length == 2) {
                    hits.merge(p[0], Integer.parseInt(p[1]), Integer::sum);
                }
            }
        }
        out.put("messagesHitByTransportFault", hits);
        return out;
    }

    private List<Map<String, Object>> kills(Soak s) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Injection in : s.injections) {
            if (in.victim == null) {
                continue;
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("kind", in.kind.name());
            m.put("victim", in.victim.name());
            m.put("atMs", s.ms(in.killNanos));
            m.put("openRequestsTouchingIt", in.affected);
            long survivorServed = 0;
            long until = in.killNanos + o.hangBound().toNanos();
            for (Req r : s.reqs.values()) {
                if (r.ctx != in.victim && r.gen != in.victim && "OK".equals(r.genSide.status)
                        && r.genSide.endNanos >= in.killNanos && r.genSide.endNanos <= until) {
                    survivorServed++;
                }
            }
            m.put("servedBySurvivorsWithinHangBoundAfterKill", survivorServed);
            out.add(m);
        }
        return out;
    }

    private List<Map<String, Object>> processes(Soak s) {
        List<Map<String, Object>> out = new ArrayList<>();
        Map<String, Object> parent = new LinkedHashMap<>();
        parent.put("name", "parent");
        parent.put("longLived", true);
        parent.put("warm", s.parentStats.get("warm"));
        parent.put("end", s.parentStats.get("end"));
        parent.put("growth", growth(s.parentStats.get("warm"), s.parentStats.get("end")));
        out.add(parent);
        for (ChildProc c : s.procs) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", c.name());
            m.put("longLived", c.incarnation == 1 && c.slot.endsWith("-a"));
            m.put("killed", c.killed);
            m.put("warm", c.stats.get("warm"));
            m.put("start", c.stats.get("start"));
            m.put("end", c.stats.get("end"));
            m.put("backgroundErrors", c.backgroundErrors);
            m.put("exit", c.stats.get("exit"));
            m.put("lastFailure", c.lastFailure);
            m.put("growth", growth(c.stats.get("warm") != null ? c.stats.get("warm") : c.stats.get("start"),
                    c.stats.get("end")));
            out.add(m);
        }
        return out;
    }

    /** End minus start of heap, fds and threads, e.g. {@code heap=+1024 fds=0 threads=-1}; null without both. */
    static String growth(String start, String end) {
        if (start == null || end == null) {
            return null;
        }
        StringBuilder b = new StringBuilder();
        for (String key : List.of("heap", "fds", "threads")) {
            long d = figure(end, key) - figure(start, key);
            b.append(b.length() == 0 ? "" : " ").append(key).append('=').append(d > 0 ? "+" : "").append(d);
        }
        return b.toString();
    }

    private static long figure(String stats, String key) {
        for (String kv : stats.split(" ")) {
            if (kv.startsWith(key + "=")) {
                return Long.parseLong(kv.substring(key.length() + 1));
            }
        }
        return 0;
    }

    private void markdown(Soak s) {
        @SuppressWarnings("unchecked")
        Map<String, Object> totals = (Map<String, Object>) json.get("totals");
        md.append("# kvtransfer soak report\n\n");
        md.append("Backend `").append(o.backend()).append("`, ").append(o.duration().toSeconds())
                .append(" s of requests, phases of ").append(o.phase().toSeconds()).append(" s, ")
                .append(o.inflight()).append(" in flight, seed ").append(o.seed()).append(", request deadline ")
                .append(o.requestTimeout().toMillis()).append(" ms, hang bound ").append(o.hangBound().toMillis())
                .append(" ms. Context `").append(Soak.CTX_SPEC).append("` (ctx-a, ctx-b), generation `")
                .append(Soak.GEN_SPEC).append("` (gen-a, gen-b), one child JVM each, loopback.\n\n");
        md.append("## Totals\n\n| figure | value |\n| --- | --- |\n");
        totals.forEach((k, v) -> md.append("| ").append(k).append(" | ").append(v).append(" |\n"));
        md.append("\n## Per fault\n\n| fault | phases | failures (side code: count) | time to error ms (min / median "
                + "/ max, n) |\n| --- | --- | --- | --- |\n");
        @SuppressWarnings("unchecked")
        Map<String, Object> faults = (Map<String, Object>) json.get("faults");
        for (FaultKind k : FaultKind.values()) {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) faults.get(k.name());
            @SuppressWarnings("unchecked")
            Map<String, Object> t = (Map<String, Object>) m.get("timeToErrorMs");
            md.append("| ").append(k).append(" | ").append(m.get("phases")).append(" | ")
                    .append(m.get("failuresByCode")).append(" | ")
                    .append(t.isEmpty() ? "-" : t.get("min") + " / " + t.get("median") + " / " + t.get("max") + ", "
                            + t.get("count")).append(" |\n");
        }
        md.append("\nMessages hit by the transport faults (all incarnations): ")
                .append(faults.get("messagesHitByTransportFault")).append("\n\n## Kills\n\n")
                .append("| kind | victim | at ms | open requests touching it | served by survivors within the "
                        + "hang bound after |\n| --- | --- | --- | --- | --- |\n");
        for (Object o1 : (List<?>) json.get("kills")) {
            Map<?, ?> m = (Map<?, ?>) o1;
            md.append("| ").append(m.get("kind")).append(" | ").append(m.get("victim")).append(" | ")
                    .append(m.get("atMs")).append(" | ").append(m.get("openRequestsTouchingIt")).append(" | ")
                    .append(m.get("servedBySurvivorsWithinHangBoundAfterKill")).append(" |\n");
        }
        md.append("\n## Processes\n\nheap = bytes used after System.gc(), fds = entries of /proc/self/fd, threads ="
                + " live threads. `warm`: after the warm-up phase; `start`: a restarted process after its first "
                + "served request; `end`: after the drain; growth = end - (warm or start).\n\n"
                + "| process | long-lived | killed | warm / start | end | growth | background errors | exit |\n"
                + "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (Map<String, Object> m : processes(s)) {
            Object first = m.get("warm") != null ? m.get("warm") : m.get("start");
            md.append("| ").append(m.get("name")).append(" | ").append(m.get("longLived")).append(" | ")
                    .append(m.getOrDefault("killed", false)).append(" | ").append(first).append(" | ")
                    .append(m.get("end")).append(" | ").append(m.get("growth")).append(" | ")
                    .append(m.getOrDefault("backgroundErrors", 0)).append(" | ")
                    .append(m.getOrDefault("exit", "-")).append(" |\n");
        }
        list("Hangs", hangs);
        list("Verification failures", badData);
        list("Failures without an ErrorCode or naming another request", unnamed());
        list("Unexplained failures (no fault overlapping the request)", unexplained());
        list("Unexpected process exits", s.unexpectedExits);
        list("Background errors (first " + 40 + ")", s.backgroundErrors);
    }

    private void list(String title, List<?> items) {
        md.append("\n## ").append(title).append(" (").append(items.size()).append(")\n\n");
        for (Object i : items.subList(0, Math.min(items.size(), LIST_MAX))) {
            md.append("- ").append(i).append('\n');
        }
    }

    void write(Path dir) throws IOException {
        Files.writeString(dir.resolve("report.md"), md.toString(), StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("requests.csv"), csv.toString(), StandardCharsets.UTF_8);
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(dir.resolve("report.json").toFile(),
                json);
    }

    /** @return requests whose generation side completed and verified */
    public long served() {
        return served;
    }

    /** @return bytes checked element by element against the pattern */
    public long bytesVerified() {
        return bytesVerified;
    }

    /** @return request sides that did not end within the hang bound */
    public List<Hang> hangs() {
        return List.copyOf(hangs);
    }

    /** @return generation sides that completed with bytes other than the pattern */
    public List<Failure> verificationFailures() {
        return List.copyOf(badData);
    }

    /** @return every failed side (error codes) */
    public List<Failure> failures() {
        return List.copyOf(failures);
    }

    /** @return failures without an ErrorCode or whose error names another request */
    public List<Failure> unnamed() {
        return failures.stream().filter(f -> !f.named()).toList();
    }

    /** @return failures that no fault overlaps */
    public List<Failure> unexplained() {
        return failures.stream().filter(f -> f.fault().equals("none")).toList();
    }

    /** @return the report as written to report.json */
    public Map<String, Object> json() {
        return json;
    }

    /** @return the markdown report */
    public String markdown() {
        return md.toString();
    }
}
