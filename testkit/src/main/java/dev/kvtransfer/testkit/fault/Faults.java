package dev.kvtransfer.testkit.fault;

import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

/**
 * The faults a {@link FaultyTransportProvider} injects, shared by every manager it creates; changed at run
 * time by the test ({@link #inject}, {@link #clear}), counted per kind ({@link #injected}). Thread-safe.
 */
public final class Faults {
    private final List<Armed> armed = new ArrayList<>();
    private final Map<Fault.Kind, Integer> counts = new EnumMap<>(Fault.Kind.class);

    private static final class Armed {
        final Fault fault;
        int left;

        Armed(Fault fault) {
            this.fault = fault;
            this.left = fault.times();
        }
    }

    /**
     * Arms a fault.
     *
     * @param f the fault
     * @return this
     */
    public synchronized Faults inject(Fault f) {
        armed.add(new Armed(f));
        return this;
    }

    /** Disarms every fault (counts stay). */
    public synchronized void clear() {
        armed.clear();
    }

    /**
     * @param kind a kind
     * @return how many messages it hit so far
     */
    public synchronized int injected(Fault.Kind kind) {
        return counts.getOrDefault(kind, 0);
    }

    /**
     * The fault a message gets, if any (the first armed one that matches and has hits left), counted.
     *
     * @param m       the message
     * @param connect true for a connect, false for a send
     * @return the fault, or null
     */
    synchronized Fault match(Fault.Message m, boolean connect) {
        for (Armed a : armed) {
            boolean kindFits = connect == (a.fault.kind() == Fault.Kind.REFUSE_CONNECT);
            if (kindFits && a.left != 0 && a.fault.where().test(m)) {
                if (a.left > 0) {
                    a.left--;
                }
                counts.merge(a.fault.kind(), 1, Integer::sum);
                return a.fault;
            }
        }
        return null;
    }
}
