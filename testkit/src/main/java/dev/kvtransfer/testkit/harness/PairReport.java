package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;

import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * What {@link FormatterHarness} observed for one layout pair.
 *
 * @param pair         the pair
 * @param requests     one report per request, in run order
 * @param failure      the first failure of the run (a formatter exception, a timeout, a leak), or {@code null}
 * @param mode         how the run moved the requests
 * @param capabilities what the formatter under test declared (its context rank 0's instance)
 */
public record PairReport(LayoutPair pair, List<RequestReport> requests, Throwable failure, HarnessOptions.Mode mode,
                         Set<FormatterCapability> capabilities) {
    /**
     * Copies.
     *
     * @param pair         pair
     * @param requests     request reports
     * @param failure      failure or null
     * @param mode         the run's mode
     * @param capabilities declared capabilities
     */
    public PairReport {
        Objects.requireNonNull(pair, "pair");
        Objects.requireNonNull(mode, "mode");
        requests = List.copyOf(requests);
        capabilities = Set.copyOf(capabilities);
    }

    /**
     * A report of a whole-request pull run whose formatter declared nothing beyond it.
     *
     * @param pair     pair
     * @param requests request reports
     * @param failure  failure or null
     */
    public PairReport(LayoutPair pair, List<RequestReport> requests, Throwable failure) {
        this(pair, requests, failure, HarnessOptions.Mode.PULL, Set.of());
    }

    /**
     * Whether the run's mode needs a capability the formatter does not declare: then the harness only checked that
     * every call of it threw {@link UnsupportedOperationException}, and nothing moved.
     *
     * @return whether the mode was refused as it must be
     */
    public boolean refusedUndeclared() {
        return mode.push() && !capabilities.contains(FormatterCapability.PUSH)
                || !mode.push() && mode.layered() && !capabilities.contains(FormatterCapability.LAYER_RANGES);
    }

    /** @return whether the run completed without an exception */
    public boolean completed() {
        return failure == null;
    }

    /**
     * One request of a pair run.
     *
     * @param index            position in the run
     * @param requestId        the context request id
     * @param promptLength     tokens
     * @param totalBlocks      blocks of the whole request
     * @param ctxServing       per context rank: whether it holds the request (attention DP)
     * @param ctxSentBytes     per context rank: payload bytes it sent
     * @param ctxNeedSend      per context rank: the formatter's {@code needSendCache}
     * @param ctxPickedByGen   per context rank: whether some generation rank picked it to receive from
     * @param genServing       per generation rank: whether it holds the request
     * @param genReceivedBytes per generation rank: payload bytes it received
     * @param genExpectedBytes per generation rank: bytes of its blocks of the request that are not reused (what it
     *                         must receive)
     * @param genZeroLayer     per generation rank: whether its PP stage owns no layer
     * @param verify           the merged KvPattern verification of every generation rank's blocks
     * @param ctxMeasuredBytes per context rank: bytes the formatter reported through {@code recordMeasure}
     * @param genMeasuredBytes per generation rank: bytes the formatter reported through {@code recordMeasure}
     * @param reusedBlocks     leading global blocks the generation side already held (never to be written)
     * @param ctxMessages      per context rank: transport messages it sent
     * @param genMessages      per generation rank: transport messages it received
     * @param writeViolations  push: what core's receiver would refuse in what was written into the generation pools
     *                         (an entry outside this request's grants, bytes overwritten by a later entry, two entries
     *                         overlapping, a writer no generation rank picks, more or fewer bytes than the blocks
     *                         after the reused prefix); empty when the run pulled or nothing was wrong
     */
    public record RequestReport(int index, long requestId, int promptLength, int totalBlocks, boolean[] ctxServing,
                                long[] ctxSentBytes, boolean[] ctxNeedSend, boolean[] ctxPickedByGen,
                                boolean[] genServing, long[] genReceivedBytes, long[] genExpectedBytes,
                                boolean[] genZeroLayer, KvPattern.Result verify, long[] ctxMeasuredBytes,
                                long[] genMeasuredBytes, int reusedBlocks, long[] ctxMessages, long[] genMessages,
                                List<String> writeViolations) {
        /**
         * Copies the violations.
         */
        public RequestReport {
            writeViolations = List.copyOf(writeViolations);
        }

        /** @return total payload bytes sent by the context ranks */
        public long totalSent() {
            long s = 0;
            for (long b : ctxSentBytes) {
                s += b;
            }
            return s;
        }

        /** @return total payload bytes received by the generation ranks */
        public long totalReceived() {
            long s = 0;
            for (long b : genReceivedBytes) {
                s += b;
            }
            return s;
        }

        /** @return transport messages sent by the context ranks */
        public long messagesSent() {
            long s = 0;
            for (long m : ctxMessages) {
                s += m;
            }
            return s;
        }

        /** @return transport messages received by the generation ranks */
        public long messagesReceived() {
            long s = 0;
            for (long m : genMessages) {
                s += m;
            }
            return s;
        }
    }
}
