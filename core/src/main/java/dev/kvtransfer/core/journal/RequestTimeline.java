package dev.kvtransfer.core.journal;

import dev.kvtransfer.core.journal.TransferJournal.Role;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;

/**
 * Everything the journals of a run say about one request, across all ranks of both instances: its events in
 * time order, which ranks took part, how it ended, and (when checksums were on) whether what each context rank
 * sent to each generation rank is what that rank received.
 */
public final class RequestTimeline {
    /** How a request ended, as far as the journals know. */
    public enum Outcome {
        /** Every rank that accepted it completed it. */
        COMPLETED,
        /** Every rank that accepted it ended it, at least one with an error, cancel or timeout. */
        FAILED,
        /** At least one rank accepted it and never recorded an end: a crash or a hang left it in flight. */
        IN_FLIGHT
    }

    private final long requestId;
    private final List<JournalEvent> events;
    private final Map<JournalEvent.Source, JournalEvent.Accepted> accepted = new LinkedHashMap<>();
    private final Map<JournalEvent.Source, JournalEvent> ends = new LinkedHashMap<>();
    private final List<String> checksumMismatches = new ArrayList<>();
    private long receivedBytes;
    private long sentBytes;
    private int checkedPairs;

    private RequestTimeline(long requestId, List<JournalEvent> events) {
        this.requestId = requestId;
        this.events = List.copyOf(events);
        for (JournalEvent e : events) {
            if (e instanceof JournalEvent.Accepted a) {
                accepted.putIfAbsent(a.source(), a);
            } else if (e instanceof JournalEvent.Completed || e instanceof JournalEvent.Ended) {
                ends.putIfAbsent(e.source(), e);
            } else if (e instanceof JournalEvent.Part p) {
                if (p.received()) {
                    receivedBytes += p.bytes();
                } else {
                    sentBytes += p.bytes();
                }
            }
        }
        compareChecksums();
    }

    /**
     * Groups events by request id (events of no request, such as OPENED, are left out).
     *
     * @param events events of a run, in time order (as {@link JournalReader#readAll} returns them)
     * @return one timeline per request, by id
     */
    public static Map<Long, RequestTimeline> of(List<JournalEvent> events) {
        Objects.requireNonNull(events, "events");
        Map<Long, List<JournalEvent>> byId = new TreeMap<>();
        for (JournalEvent e : events) {
            if (e.requestId() != Long.MIN_VALUE && !(e instanceof JournalEvent.PeerContact)) {
                byId.computeIfAbsent(e.requestId(), k -> new ArrayList<>()).add(e);
            }
        }
        Map<Long, RequestTimeline> out = new LinkedHashMap<>();
        byId.forEach((id, list) -> out.put(id, new RequestTimeline(id, list)));
        return out;
    }

    /**
     * @param events events of a run
     * @return the ranks whose journal has no CLOSED record: the process crashed or is still running
     */
    public static Set<JournalEvent.Source> unclosedRanks(List<JournalEvent> events) {
        Set<JournalEvent.Source> open = new LinkedHashSet<>();
        for (JournalEvent e : events) {
            if (e instanceof JournalEvent.Opened) {
                open.add(e.source());
            } else if (e instanceof JournalEvent.Closed) {
                open.remove(e.source());
            }
        }
        return open;
    }

    /** Compares, per (context rank, generation rank) pair, the CRCs of the parts sent with those received. */
    private void compareChecksums() {
        Map<String, List<Long>> sent = new TreeMap<>();
        Map<String, List<Long>> received = new TreeMap<>();
        for (JournalEvent e : events) {
            if (e instanceof JournalEvent.Part p && p.hasCrc()) {
                String key = p.received() ? p.peerRank() + "->" + p.source().rank()
                        : p.source().rank() + "->" + p.peerRank();
                (p.received() ? received : sent).computeIfAbsent(key, k -> new ArrayList<>()).add(p.crc32c());
            }
        }
        boolean finished = ranksInFlight().isEmpty() && !accepted.isEmpty();
        for (Map.Entry<String, List<Long>> s : sent.entrySet()) {
            List<Long> r = received.get(s.getKey());
            if (r == null) {
                continue;
            }
            checkedPairs++;
            List<Long> sentCrcs = s.getValue();
            int common = Math.min(sentCrcs.size(), r.size());
            // A request cut short (crash, hang) has sent parts not yet received: only a finished one must match
            // in count; the parts both sides recorded must match in any case.
            boolean differ = !sentCrcs.subList(0, common).equals(r.subList(0, common))
                    || finished && sentCrcs.size() != r.size();
            if (differ) {
                checksumMismatches.add(String.format(Locale.ROOT, "ctx rank %s gen rank: %d parts sent with CRC32C %s,"
                        + " %d received with %s", s.getKey(), sentCrcs.size(), hex(sentCrcs), r.size(), hex(r)));
            }
        }
    }

    private static String hex(List<Long> crcs) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < crcs.size() && i < 8; i++) {
            sb.append(i == 0 ? "" : ",").append(Long.toHexString(crcs.get(i)));
        }
        return sb.append(crcs.size() > 8 ? ",...]" : "]").toString();
    }

    /** @return the request id */
    public long requestId() {
        return requestId;
    }

    /** @return the request's events, in time order */
    public List<JournalEvent> events() {
        return events;
    }

    /** @return the last event recorded for the request */
    public JournalEvent lastEvent() {
        return events.get(events.size() - 1);
    }

    /** @return the ACCEPTED event of every rank that took the request, by rank */
    public Map<JournalEvent.Source, JournalEvent.Accepted> accepted() {
        return accepted;
    }

    /**
     * @param role a side
     * @return the ACCEPTED events of that side
     */
    public List<JournalEvent.Accepted> accepted(Role role) {
        return accepted.values().stream().filter(a -> a.role() == role).toList();
    }

    /** @return the end event (COMPLETED, FAILED, CANCELLED, TIMED_OUT) of every rank that recorded one */
    public Map<JournalEvent.Source, JournalEvent> ends() {
        return ends;
    }

    /** @return the ranks that accepted the request and never recorded its end */
    public List<JournalEvent.Source> ranksInFlight() {
        List<JournalEvent.Source> out = new ArrayList<>();
        for (JournalEvent.Source s : accepted.keySet()) {
            if (!ends.containsKey(s)) {
                out.add(s);
            }
        }
        return out;
    }

    /** @return how the request ended */
    public Outcome outcome() {
        if (accepted.isEmpty() || !ranksInFlight().isEmpty()) {
            return Outcome.IN_FLIGHT;
        }
        for (JournalEvent e : ends.values()) {
            if (!(e instanceof JournalEvent.Completed)) {
                return Outcome.FAILED;
            }
        }
        return Outcome.COMPLETED;
    }

    /** @return the first error, cancel or timeout recorded, or null */
    public JournalEvent.Ended firstError() {
        for (JournalEvent e : events) {
            if (e instanceof JournalEvent.Ended x) {
                return x;
            }
        }
        return null;
    }

    /** @return the prompt length the ranks accepted it with (-1 when none did) */
    public int promptLength() {
        return accepted.isEmpty() ? -1 : accepted.values().iterator().next().promptLength();
    }

    /** @return payload bytes all ranks recorded as received */
    public long receivedBytes() {
        return receivedBytes;
    }

    /** @return payload bytes all ranks recorded as sent */
    public long sentBytes() {
        return sentBytes;
    }

    /**
     * The generation side's transfer time: from the first generation rank accepting the request to the last one
     * completing it (wall clock, as ranks may live in different processes).
     *
     * @return nanoseconds, or -1 when the generation side did not complete it
     */
    public long generationDurationNanos() {
        long start = Long.MAX_VALUE;
        long end = Long.MIN_VALUE;
        for (JournalEvent.Accepted a : accepted(Role.GENERATION)) {
            start = Math.min(start, a.wallNanos());
            JournalEvent e = ends.get(a.source());
            if (!(e instanceof JournalEvent.Completed)) {
                return -1;
            }
            end = Math.max(end, e.wallNanos());
        }
        return start == Long.MAX_VALUE ? -1 : end - start;
    }

    /** @return the first ACCEPTED time of the request, wall clock; Long.MAX_VALUE when none */
    public long firstAcceptedWallNanos() {
        long t = Long.MAX_VALUE;
        for (JournalEvent.Accepted a : accepted.values()) {
            t = Math.min(t, a.wallNanos());
        }
        return t;
    }

    /** @return (context rank, generation rank) pairs whose part checksums could be compared */
    public int checksumPairsCompared() {
        return checkedPairs;
    }

    /** @return descriptions of the pairs whose sent and received checksums differ */
    public List<String> checksumMismatches() {
        return checksumMismatches;
    }

    /**
     * One line describing an event, e.g. {@code PART_SENT peer 1, 4096 B, crc32c 1a2b3c4d, 0.120 ms}.
     *
     * @param e an event
     * @return the description (without source and time)
     */
    public static String describe(JournalEvent e) {
        if (e instanceof JournalEvent.Opened o) {
            return String.format(Locale.ROOT, "OPENED format %d, pid %d on %s, checksums %s, %s", o.formatVersion(),
                    o.pid(), o.host(), o.checksums() ? "on" : "off", o.selfState());
        } else if (e instanceof JournalEvent.PeerContact c) {
            return String.format(Locale.ROOT, "PEER_CONTACT %s, peer rank %d (%s %s), self %s, peer %s", c.role(),
                    c.peerRank(), c.peerTransport(), c.peerAddresses(), c.selfState(), c.peerState());
        } else if (e instanceof JournalEvent.Accepted a) {
            return String.format(Locale.ROOT, "ACCEPTED %s, prompt %d tokens, %d blocks", a.role(), a.promptLength(),
                    a.blockCount());
        } else if (e instanceof JournalEvent.RequestInfo i) {
            return String.format(Locale.ROOT, "%s peer rank %d", i.type(), i.peerRank());
        } else if (e instanceof JournalEvent.ReadySignal r) {
            return String.format(Locale.ROOT, "%s peer rank %d, %s", r.type(), r.peerRank(), r.value());
        } else if (e instanceof JournalEvent.Part p) {
            return String.format(Locale.ROOT, "%s peer rank %d, %d B%s, %.3f ms", p.type(), p.peerRank(), p.bytes(),
                    p.hasCrc() ? String.format(Locale.ROOT, ", crc32c %08x", p.crc32c()) : "",
                    p.durationNanos() / 1e6);
        } else if (e instanceof JournalEvent.Completed c) {
            return String.format(Locale.ROOT, "COMPLETED %s, %d B", c.role(), c.bytes());
        } else if (e instanceof JournalEvent.Ended x) {
            return String.format(Locale.ROOT, "%s %s, %s: %s", x.type(), x.role(), x.code(), x.message());
        } else if (e instanceof JournalEvent.Lost l) {
            return "LOST " + l.count() + " events dropped (ring full)";
        } else if (e instanceof JournalEvent.Closed c) {
            return "CLOSED after " + c.written() + " events, " + c.lost() + " lost";
        }
        return e.toString();
    }
}
