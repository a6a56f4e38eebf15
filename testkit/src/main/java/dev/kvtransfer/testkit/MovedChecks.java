package dev.kvtransfer.testkit;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.testkit.harness.PairReport;

import java.util.List;

/** What the formatter suite checks of every request it moved: counts of elements, bytes and messages per rank. */
final class MovedChecks {
    private MovedChecks() {
    }

    /** Elements (or bytes) of a generation rank's recurrent states of one request; 0 for attention only. */
    static long recurrent(CacheState gen, int rank, boolean bytes) {
        if (!RecurrentStateShape.holdsState(gen, rank)) {
            return 0;
        }
        RecurrentStateShape s = gen.recurrentState();
        int tp = gen.tensorParallelism();
        long conv = bytes ? s.convBytesPerRank(tp) : s.convBytesPerRank(tp) / s.convDataType().bytes();
        long ssm = bytes ? s.ssmBytesPerRank(tp) : s.ssmBytesPerRank(tp) / s.ssmDataType().bytes();
        return s.recurrentLayerCount(gen.ppRank(rank)) * (conv + ssm);
    }

    /** Rules 1, 2, 3, 11, 13 and 14 for one request of a run (pull or push, whole or by layer ranges). */
    static void check(PairReport r, PairReport.RequestReport q, String at, int indexerDim, List<String> failures) {
        CacheState gen = r.pair().genFor(q.index());
        CacheState ctx = r.pair().ctxFor(q.index());
        long expectedElements = 0;
        long expectedBytes = 0;
        for (int g = 0; g < q.genServing().length; g++) {
            expectedBytes += q.genExpectedBytes()[g];
            if (q.genServing()[g] && !q.genZeroLayer()[g]) {
                BlockLayout l = BlockLayout.of(gen, g);
                int blocks = BlockDistribution.count(q.totalBlocks(), gen.contextParallelism(), gen.cpRank(g));
                expectedElements += blocks * l.blockBytes() / l.elementBytes();
                expectedElements += (long) blocks * l.localLayers() * l.tokensPerBlock() * indexerDim;
            }
            expectedElements += q.genServing()[g] ? recurrent(gen, g, false) : 0;
            if (q.genServing()[g] && q.genReceivedBytes()[g] != q.genExpectedBytes()[g]) {
                failures.add(at + " gen rank " + g + ": received " + q.genReceivedBytes()[g] + " bytes, its blocks"
                        + " after the reused prefix hold " + q.genExpectedBytes()[g]);
            }
        }
        if (!q.verify().ok()) {
            failures.add(at + " (prompt " + q.promptLength() + "): " + q.verify());
        } else if (q.verify().checkedElements() != expectedElements) {
            failures.add(at + ": checked " + q.verify().checkedElements() + " elements, the generation blocks hold "
                    + expectedElements);
        }
        if (q.totalSent() != q.totalReceived() || q.totalReceived() != expectedBytes) {
            failures.add(at + ": sent " + q.totalSent() + " bytes, received " + q.totalReceived() + ", expected "
                    + expectedBytes);
        }
        if (q.messagesSent() != q.messagesReceived()) {
            failures.add(at + ": " + q.messagesSent() + " messages or entries sent, " + q.messagesReceived()
                    + " received");
        }
        if (q.reusedBlocks() == q.totalBlocks() && (q.messagesSent() != 0 || q.totalSent() != 0)) {
            failures.add(at + ": every block reused, yet " + q.totalSent() + " bytes in " + q.messagesSent()
                    + " messages or entries moved");
        }
        for (int c = 0; c < q.ctxServing().length; c++) {
            if (!q.ctxServing()[c]) {
                continue;
            }
            if (q.ctxMeasuredBytes()[c] != q.ctxSentBytes()[c]) {
                failures.add(at + " ctx rank " + c + ": moved " + q.ctxSentBytes()[c] + " bytes, measured "
                        + q.ctxMeasuredBytes()[c]);
            }
            boolean picked = q.ctxPickedByGen()[c];
            int first = BlockDistribution.firstGlobalBlock(q.totalBlocks(), ctx.contextParallelism(), ctx.cpRank(c));
            int count = BlockDistribution.count(q.totalBlocks(), ctx.contextParallelism(), ctx.cpRank(c));
            boolean holdsBlocks = first + count > q.reusedBlocks() && count > 0;
            boolean sent = q.ctxSentBytes()[c] > 0;
            if (!picked && sent || picked && holdsBlocks && !sent && ctx.layerCount(ctx.ppRank(c)) > 0) {
                failures.add(at + " ctx rank " + c + ": picked by a generation rank = " + picked + ", moved "
                        + q.ctxSentBytes()[c] + " bytes");
            }
        }
        if (!r.mode().push()) {
            for (int g = 0; g < q.genReceivedBytes().length; g++) {
                if (q.genMeasuredBytes()[g] != q.genReceivedBytes()[g]) {
                    failures.add(at + " gen rank " + g + ": received " + q.genReceivedBytes()[g] + " bytes, measured "
                            + q.genMeasuredBytes()[g]);
                }
            }
        }
    }
}
