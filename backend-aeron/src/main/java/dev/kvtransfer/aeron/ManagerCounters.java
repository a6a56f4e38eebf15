package dev.kvtransfer.aeron;

import org.agrona.concurrent.status.AtomicCounter;

import java.util.Map;

/** This manager's counters, in the runtime's counters buffer (freed on close). */
final class ManagerCounters {
    final AtomicCounter messagesSent;
    final AtomicCounter bytesSent;
    final AtomicCounter messagesReceived;
    final AtomicCounter bytesReceived;
    final AtomicCounter peersLost;
    final AtomicCounter unauthorized;
    final AtomicCounter imagesRefused;
    final AtomicCounter recoveries;
    final AtomicCounter earlyBytes;
    final AtomicCounter callerCompleted;
    final AtomicCounter doorbellRings;
    private final AtomicCounter[] all;

    ManagerCounters(AeronRuntime rt, String name) {
        var c = rt.counters();
        messagesSent = c.newCounter("aeron " + name + " messages sent");
        bytesSent = c.newCounter("aeron " + name + " bytes sent");
        messagesReceived = c.newCounter("aeron " + name + " messages received");
        bytesReceived = c.newCounter("aeron " + name + " bytes received");
        peersLost = c.newCounter("aeron " + name + " peers lost");
        unauthorized = c.newCounter("aeron " + name + " unauthorized streams");
        imagesRefused = c.newCounter("aeron " + name + " streams refused");
        recoveries = c.newCounter("aeron " + name + " client recoveries");
        earlyBytes = c.newCounter("aeron " + name + " early bytes held");
        callerCompleted = c.newCounter("aeron " + name + " ops completed by their polling caller");
        doorbellRings = c.newCounter("aeron " + name + " doorbells rung (peers of this host woken)");
        all = new AtomicCounter[] {messagesSent, bytesSent, messagesReceived, bytesReceived, peersLost,
            unauthorized, imagesRefused, recoveries, earlyBytes, callerCompleted, doorbellRings};
    }

    void sent(long bytes) {
        messagesSent.increment();
        bytesSent.getAndAdd(bytes);
    }

    /** Agent only. */
    void received(long bytes) {
        messagesReceived.incrementOrdered();
        bytesReceived.getAndAddOrdered(bytes);
    }

    Map<String, Long> snapshot(ErrorReporter r) {
        Map<String, Long> m = new java.util.LinkedHashMap<>();
        m.put("messagesSent", messagesSent.get());
        m.put("bytesSent", bytesSent.get());
        m.put("messagesReceived", messagesReceived.get());
        m.put("bytesReceived", bytesReceived.get());
        m.put("peersLost", peersLost.get());
        m.put("unauthorized", unauthorized.get());
        m.put("streamsRefused", imagesRefused.get());
        m.put("clientRecoveries", recoveries.get());
        m.put("earlyBytes", earlyBytes.get());
        m.put("opsCompletedByCaller", callerCompleted.get());
        m.put("doorbellRings", doorbellRings.get());
        m.put("errors", r.count());
        m.put("errorsSuppressed", r.suppressed());
        return m;
    }

    /** The embedded driver's error counts (absent on an external driver). */
    static void driverErrors(Map<String, Long> m, DriverErrorLog d) {
        if (d != null) {
            m.put("driverErrors", d.count());
            m.put("driverErrorLinesLogged", d.linesLogged());
        }
    }

    void close() {
        for (AtomicCounter a : all) {
            a.close();
        }
    }
}
