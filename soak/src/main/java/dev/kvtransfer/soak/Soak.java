package dev.kvtransfer.soak;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The soak's parent: starts two context and two generation child JVMs ({@link SoakChild}) on loopback, keeps
 * {@code inflight} requests flowing between every (context, generation) pair, cycles the fault phases
 * ({@link FaultKind}) and collects what every request and process did into a {@link SoakReport}. The {@code -a}
 * children are never killed (they are the long-lived processes whose heap, descriptors and threads are compared);
 * kills hit {@code ctx-b} and {@code gen-b}, which are restarted at once.
 *
 * <p>All state is guarded by this object's monitor: the children's reader threads and the driving loop both
 * take it.
 */
public final class Soak {
    /**
     * The fault phases, cycled in this order after the warm-up. The losses come before the stall: a stalled
     * context process holds the requests sent to it until their deadline, which can fill every in-flight slot.
     */
    public enum FaultKind {
        /** One data message dropped on each context process. */
        LOSS_DATA,
        /** One request info (generation to context, a control message) dropped on each generation process. */
        LOSS_CONTROL,
        /** Every data message of the context processes delayed. */
        DELAY,
        /** One context process stopped (every send parked) for longer than the request deadline. */
        STALL,
        /**
         * Every request of the phase cancelled: half on the generation side as soon as it is asked for (still
         * queued), half on the context side 0-30 ms after (sending).
         */
        CANCEL_STORM,
        /** {@code ctx-b} killed (SIGKILL) with requests in flight, then restarted. */
        KILL_CONTEXT,
        /** {@code gen-b} killed (SIGKILL) with requests in flight, then restarted. */
        KILL_GENERATION
    }

    static final String CTX_SPEC = "2,1,8,8,64,16,FLOAT16";
    static final String GEN_SPEC = "1,1,8,8,64,16,FLOAT16";
    static final int TOKENS_PER_BLOCK = 16;
    private static final long DELAY_MS = 20;

    /** One side (context or generation) of a request. */
    static final class Side {
        long startNanos = -1;
        long endNanos = -1;
        /** OK, FAIL, BADDATA, REFUSED, LOST (its process died), NOT_SENT. */
        String status;
        String code;
        long errorRequestId = Long.MIN_VALUE;
        String message;
        long bytes;
        boolean hung;

        boolean open() {
            return startNanos >= 0 && endNanos < 0 && !hung;
        }
    }

    /** One request. */
    static final class Req {
        final long id;
        final int prompt;
        final ChildProc ctx;
        final ChildProc gen;
        final Side ctxSide = new Side();
        final Side genSide = new Side();
        long cancelAtNanos = -1;
        long cancelSentNanos = -1;
        /** Which side the cancel goes to: the generation side (still queued) or the context side (sending). */
        boolean cancelContext;
        boolean cancelAccepted;

        Req(long id, int prompt, ChildProc ctx, ChildProc gen) {
            this.id = id;
            this.prompt = prompt;
            this.ctx = ctx;
            this.gen = gen;
        }

        boolean open() {
            return ctxSide.open() || genSide.open();
        }
    }

    /** One fault injected (or kill). */
    static final class Injection {
        final FaultKind kind;
        final long atNanos;
        long windowEndNanos;
        final String target;
        ChildProc victim;
        long killNanos = -1;
        int affected;

        Injection(FaultKind kind, long atNanos, String target) {
            this.kind = kind;
            this.atNanos = atNanos;
            this.target = target;
        }
    }

    private final SoakOptions o;
    private final Random random;
    private final Path secret;
    final long t0 = System.nanoTime();
    final Map<Long, Req> reqs = new LinkedHashMap<>();
    /** The requests with a side still open (the driving loop scans these, not every request of the run). */
    private final java.util.Set<Req> open = new java.util.LinkedHashSet<>();
    private long servedCount;
    final List<Injection> injections = new ArrayList<>();
    final List<ChildProc> procs = new ArrayList<>();
    final Map<String, ChildProc> current = new LinkedHashMap<>();
    final List<String> unexpectedExits = new ArrayList<>();
    final List<String> backgroundErrors = new ArrayList<>();
    final Map<String, String> parentStats = new LinkedHashMap<>();
    final Map<String, String> hits = new LinkedHashMap<>();
    final Map<FaultKind, Integer> armed = new EnumMap<>(FaultKind.class);
    private long nextId = 1;
    private int roundRobin;
    private Injection phaseInjection;
    private int cycle;
    long issuingEndedNanos = -1;
    long endNanos = -1;

    Soak(SoakOptions o) throws IOException {
        this.o = o;
        this.random = new Random(o.seed());
        Files.createDirectories(o.out());
        this.secret = o.out().resolve("secret.bin");
        byte[] b = new byte[32];
        new SecureRandom().nextBytes(b);
        Files.write(secret, b);
        Files.setPosixFilePermissions(secret, PosixFilePermissions.fromString("rw-------"));
    }

    /**
     * Runs the soak and writes its report.
     *
     * @param o what to do
     * @return the report (also written to {@code o.out()})
     * @throws Exception when the children cannot start or the report cannot be written
     */
    public static SoakReport run(SoakOptions o) throws Exception {
        Soak s = new Soak(o);
        try {
            s.drive();
        } finally {
            s.closeAll();
        }
        SoakReport r = new SoakReport(o, s);
        r.write(o.out());
        return r;
    }

    private int blocksPerRank() {
        return o.inflight() * (o.maxBlocks() + 1) * 2 + 16;
    }

    private List<String> childArgs(String role, String name) {
        List<String> a = new ArrayList<>(List.of(role, name, o.backend(), role.equals("ctx") ? CTX_SPEC : GEN_SPEC,
                Integer.toString(blocksPerRank())));
        a.add("kvtransfer.transferBufferBytes=4194304");
        a.add("kvtransfer.chunkBytes=1048576");
        a.add("kvtransfer.kvTransferTimeoutMs=" + o.requestTimeout().toMillis());
        a.add("kvtransfer.authSecretFile=" + secret);
        a.add("aeron.peerTimeoutMs=2000");
        return a;
    }

    private synchronized ChildProc startChild(String slot) throws IOException {
        ChildProc old = current.get(slot);
        int inc = old == null ? 1 : old.incarnation + 1;
        String role = slot.substring(0, 3);
        ChildProc c = ChildProc.start(slot, role, inc, o.childJvmFlags(), childArgs(role, slot + "-" + inc),
                o.out().resolve(slot + "-" + inc + ".log"), this::onLine);
        current.put(slot, c);
        procs.add(c);
        return c;
    }

    long ms(long nanos) {
        return TimeUnit.NANOSECONDS.toMillis(nanos - t0);
    }

    private void drive() throws Exception {
        for (String slot : List.of("ctx-a", "ctx-b", "gen-a", "gen-b")) {
            startChild(slot);
        }
        long readyBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!procs.stream().allMatch(c -> c.ready)) {
            if (System.nanoTime() > readyBy || procs.stream().anyMatch(c -> c.ended)) {
                throw new IllegalStateException("children not ready in 120 s: " + describe());
            }
            pause();
        }
        long start = System.nanoTime();
        long end = start + o.duration().toNanos();
        long phaseEnd = start + o.phase().toNanos();
        boolean warm = false;
        FaultKind[] kinds = FaultKind.values();
        long warmBy = start + Math.max(o.phase().toNanos(), o.duration().toNanos() / 3);
        // Issuing stops once the duration is over and every fault kind had its phase.
        while (true) {
            long now = System.nanoTime();
            if (now >= phaseEnd && !warm && served() < o.inflight() && now < warmBy) {
                phaseEnd = now + TimeUnit.MILLISECONDS.toNanos(100); // not warm yet: too little served
            } else if (now >= phaseEnd) {
                if (!warm) {
                    warm = true;
                    stats("warm");
                } else {
                    endPhase();
                }
                if (now >= end && cycle >= kinds.length) {
                    break;
                }
                FaultKind k = kinds[cycle % kinds.length];
                cycle++;
                beginPhase(k);
                phaseEnd = System.nanoTime() + o.phase().toNanos();
            }
            step();
            pause();
        }
        if (phaseInjection != null) {
            endPhase();
        }
        synchronized (this) {
            issuingEndedNanos = System.nanoTime();
        }
        // Drain: no new requests; every open side ends or becomes a hang.
        long drainBy = System.nanoTime() + o.hangBound().toNanos() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < drainBy) {
            synchronized (this) {
                checkHangs(System.nanoTime());
                fireCancels(System.nanoTime());
                if (openRequests().isEmpty()) {
                    break;
                }
            }
            pause();
        }
        awaitReadyOfRestarts();
        stats("end");
        synchronized (this) {
            endNanos = System.nanoTime();
        }
    }

    private void awaitReadyOfRestarts() {
        long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < by && currentSnapshot().stream().anyMatch(c -> c.alive() && !c.ready)) {
            pause();
        }
    }

    private synchronized long served() {
        return servedCount;
    }

    private synchronized List<ChildProc> currentSnapshot() {
        return new ArrayList<>(current.values());
    }

    /** Asks every live current child for its figures after a GC, and takes this JVM's. */
    private void stats(String label) {
        List<ChildProc> live = currentSnapshot().stream().filter(c -> c.alive() && c.ready).toList();
        for (ChildProc c : live) {
            c.send("STATS " + label);
        }
        synchronized (this) {
            parentStats.put(label, SoakChild.stats());
        }
        long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (System.nanoTime() < by && live.stream().anyMatch(c -> c.alive() && !c.stats.containsKey(label))) {
            pause();
        }
    }

    private synchronized void beginPhase(FaultKind k) {
        long now = System.nanoTime();
        String target;
        List<ChildProc> ctxs = List.of(current.get("ctx-a"), current.get("ctx-b"));
        ChildProc one = ctxs.get(cycle / FaultKind.values().length % 2);
        switch (k) {
            case LOSS_DATA -> {
                ctxs.forEach(c -> c.send("FAULT DROP data 1 0"));
                target = "ctx-a, ctx-b: one data message each";
            }
            case DELAY -> {
                ctxs.forEach(c -> c.send("FAULT DELAY data -1 " + DELAY_MS));
                target = "ctx-a, ctx-b: every data message +" + DELAY_MS + " ms";
            }
            case STALL -> {
                long ms = o.requestTimeout().toMillis() + 1000;
                one.send("FAULT STALL data 1 " + ms);
                target = one.slot + ": every send stopped " + ms + " ms";
            }
            case LOSS_CONTROL -> {
                List.of(current.get("gen-a"), current.get("gen-b")).forEach(c -> c.send("FAULT DROP info 1 0"));
                target = "gen-a, gen-b: one request info each";
            }
            case CANCEL_STORM -> {
                target = "every request of the phase, and every one open now";
                for (Req r : openRequests()) {
                    if (r.genSide.open() && r.cancelAtNanos < 0) {
                        r.cancelAtNanos = now;
                    }
                }
            }
            case KILL_CONTEXT -> target = "ctx-b";
            case KILL_GENERATION -> target = "gen-b";
            default -> throw new IllegalStateException(k.name());
        }
        Injection in = new Injection(k, now, target);
        long window = k == FaultKind.STALL ? o.requestTimeout().toNanos() + TimeUnit.SECONDS.toNanos(1) : 0;
        in.windowEndNanos = now + Math.max(o.phase().toNanos(), window);
        injections.add(in);
        phaseInjection = in;
        armed.merge(k, 1, Integer::sum);
    }

    private synchronized void endPhase() {
        for (ChildProc c : current.values()) {
            c.send("CLEAR");
            c.send("COUNTS " + c.name());
        }
        phaseInjection = null;
    }

    private void step() throws IOException {
        long now = System.nanoTime();
        List<String> restart = new ArrayList<>();
        synchronized (this) {
            checkHangs(now);
            fireCancels(now);
            Injection in = phaseInjection;
            if (in != null && in.victim == null
                    && (in.kind == FaultKind.KILL_CONTEXT || in.kind == FaultKind.KILL_GENERATION)) {
                maybeKill(in, now);
            }
            for (Map.Entry<String, ChildProc> e : current.entrySet()) {
                // A child that dies at every start is not restarted for ever.
                if ((e.getValue().killed || e.getValue().ended) && e.getValue().incarnation < 100) {
                    restart.add(e.getKey());
                }
            }
            topUp(now);
        }
        for (String slot : restart) {
            startChild(slot);
        }
    }

    /** Kills the victim once a request touching it is mid-transfer (its generation side started). */
    private void maybeKill(Injection in, long now) {
        ChildProc victim = current.get(in.kind == FaultKind.KILL_CONTEXT ? "ctx-b" : "gen-b");
        if (!victim.alive() || !victim.ready) {
            return;
        }
        boolean midTransfer = openRequests().stream().anyMatch(r -> (r.ctx == victim || r.gen == victim)
                && r.genSide.open() && now - r.genSide.startNanos > TimeUnit.MILLISECONDS.toNanos(2));
        if (!midTransfer && now - in.atNanos < o.phase().toNanos() / 2) {
            return;
        }
        int affected = 0;
        for (Req r : openRequests()) {
            if ((r.ctx == victim || r.gen == victim) && r.open()) {
                affected++;
            }
        }
        in.affected = affected;
        in.victim = victim;
        in.killNanos = now;
        victim.kill();
        in.windowEndNanos = Math.max(in.windowEndNanos, now + o.hangBound().toNanos());
    }

    private void topUp(long now) {
        if (issuingEndedNanos >= 0) {
            return;
        }
        long inFlight = openRequests().size();
        List<ChildProc[]> pairs = new ArrayList<>();
        for (String c : List.of("ctx-a", "ctx-b")) {
            for (String g : List.of("gen-a", "gen-b")) {
                ChildProc cc = current.get(c);
                ChildProc gg = current.get(g);
                if (cc.alive() && cc.ready && gg.alive() && gg.ready) {
                    pairs.add(new ChildProc[] {cc, gg});
                }
            }
        }
        while (inFlight < o.inflight() && !pairs.isEmpty()) {
            ChildProc[] p = pairs.get(roundRobin++ % pairs.size());
            int blocks = 1 + random.nextInt(o.maxBlocks());
            int prompt = (blocks - 1) * TOKENS_PER_BLOCK + 1 + random.nextInt(TOKENS_PER_BLOCK);
            Req r = new Req(nextId++, prompt, p[0], p[1]);
            reqs.put(r.id, r);
            open.add(r);
            r.ctxSide.startNanos = now;
            if (phaseInjection != null && phaseInjection.kind == FaultKind.CANCEL_STORM) {
                r.cancelAtNanos = -2; // set when its generation side starts
            }
            if (!p[0].send("CTX " + r.id + " " + prompt)) {
                r.ctxSide.endNanos = now;
                r.ctxSide.status = "NOT_SENT";
            }
            inFlight++;
        }
    }

    /** @return the requests with a side open, after dropping those that ended */
    private List<Req> openRequests() {
        open.removeIf(r -> !r.open());
        return new ArrayList<>(open);
    }

    private void fireCancels(long now) {
        for (Req r : openRequests()) {
            Side side = r.cancelContext ? r.ctxSide : r.genSide;
            if (r.cancelAtNanos >= 0 && r.cancelSentNanos < 0 && now >= r.cancelAtNanos && side.open()) {
                r.cancelSentNanos = now;
                (r.cancelContext ? r.ctx : r.gen).send("CANCEL " + r.id);
            }
        }
    }

    private void checkHangs(long now) {
        long bound = o.hangBound().toNanos();
        for (Req r : openRequests()) {
            for (Side s : List.of(r.ctxSide, r.genSide)) {
                if (s.open() && now - s.startNanos > bound) {
                    s.hung = true;
                }
            }
        }
    }

    /** A line from a child (its reader thread). */
    private synchronized void onLine(ChildProc c, String line) {
        long now = System.nanoTime();
        String[] w = line.split(" ", 3);
        switch (w[0]) {
            case "READY" -> c.ready = true;
            case "PARAMS" -> params(c, Long.parseLong(w[1]), w[2], now);
            case "CTXDONE", "GENDONE" -> {
                Req r = reqs.get(Long.parseLong(w[1]));
                if (r != null) {
                    Side s = w[0].equals("CTXDONE") ? r.ctxSide : r.genSide;
                    done(s, w[2], now);
                    if (s == r.genSide && "OK".equals(s.status)) {
                        servedCount++;
                        firstServed(r);
                    }
                }
            }
            case "CTXREFUSED" -> {
                Req r = reqs.get(Long.parseLong(w[1]));
                if (r != null) {
                    r.ctxSide.endNanos = now;
                    r.ctxSide.status = "REFUSED";
                    r.ctxSide.message = w[2];
                }
            }
            case "STATS" -> c.stats.put(w[1], w[2]);
            case "COUNTS" -> hits.put(w[1], w[2].replace("injected=", ""));
            case "BGERROR" -> {
                c.backgroundErrors++;
                if (backgroundErrors.size() < 40) {
                    backgroundErrors.add(c.name() + " at " + ms(now) + " ms: " + line.substring(8));
                }
            }
            case "FAILED" -> c.lastFailure = line;
            case "CANCELLED" -> {
                Req r = reqs.get(Long.parseLong(w[1]));
                if (r != null) {
                    r.cancelAccepted = Boolean.parseBoolean(w[2]);
                }
            }
            case "EOF" -> processEnded(c, now);
            default -> {
                // FAULTED, CLOSED: nothing to do
            }
        }
    }

    private void params(ChildProc c, long id, String params64, long now) {
        Req r = reqs.get(id);
        if (r == null) {
            return;
        }
        if (!r.gen.send("GEN " + id + " " + r.prompt + " " + params64)) {
            r.genSide.status = "NOT_SENT";
            return;
        }
        r.genSide.startNanos = now;
        if (r.cancelAtNanos == -2) {
            r.cancelContext = (id & 1) == 1;
            if (r.cancelContext) {
                r.cancelAtNanos = now + TimeUnit.MICROSECONDS.toNanos(random.nextInt(30_000));
            } else {
                r.cancelAtNanos = now;
                r.cancelSentNanos = now;
                r.gen.send("CANCEL " + id);
            }
        }
    }

    private static void done(Side s, String rest, long now) {
        if (s.endNanos >= 0) {
            return;
        }
        s.endNanos = now;
        String[] w = rest.split(" ", 4);
        s.status = w[0];
        switch (w[0]) {
            case "OK" -> s.bytes = w.length > 1 ? Long.parseLong(w[1]) : 0;
            case "FAIL" -> {
                s.code = w[1];
                s.errorRequestId = Long.parseLong(w[2]);
                s.message = w.length > 3 ? w[3] : "";
            }
            default -> s.message = rest;
        }
    }

    /** A restarted incarnation's start figures: taken once it served its first request. */
    private void firstServed(Req r) {
        for (ChildProc c : List.of(r.ctx, r.gen)) {
            if (c.incarnation > 1 && !c.stats.containsKey("start") && !c.stats.containsKey("start-asked")) {
                c.stats.put("start-asked", "");
                c.send("STATS start");
            }
        }
    }

    private void processEnded(ChildProc c, long now) {
        if (!c.killed && endNanos < 0 && !c.stats.containsKey("exit")) {
            unexpectedExits.add(c.name() + " at " + ms(now) + " ms" + (c.lastFailure == null ? "" : ": "
                    + c.lastFailure));
        }
        for (Req r : openRequests()) {
            for (Side s : List.of(r.ctxSide, r.genSide)) {
                if ((s == r.ctxSide ? r.ctx : r.gen) == c && s.open()) {
                    s.endNanos = now;
                    s.status = "LOST";
                }
            }
        }
    }

    private void closeAll() {
        List<ChildProc> live = currentSnapshot();
        for (ChildProc c : live) {
            c.stats.put("exit", "asked");
            c.send("EXIT");
        }
        for (ChildProc c : live) {
            int code = c.awaitExit(30_000);
            c.stats.put("exit", Integer.toString(code));
        }
        for (ChildProc c : procs) {
            if (c.process.isAlive()) {
                c.process.destroyForcibly();
            }
        }
    }

    private String describe() {
        StringBuilder b = new StringBuilder();
        for (ChildProc c : procs) {
            b.append(c.name()).append(c.ready ? " ready" : " not ready").append(c.ended ? " ended" : "")
                    .append(c.lastFailure == null ? "" : " " + c.lastFailure).append("; ");
        }
        return b.toString();
    }

    private static void pause() {
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(5));
    }

    SoakOptions options() {
        return o;
    }
}
