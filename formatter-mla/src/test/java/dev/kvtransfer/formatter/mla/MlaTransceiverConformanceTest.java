package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutGrid.Side;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

/**
 * The whole transfer path (core's {@code CacheTransceiver}, the loopback transport, this formatter found by
 * {@code ServiceLoader} for MLA) over a dozen representative MLA pairs: duplicate senders, PP re-sharding
 * (uneven, zero-layer), generation CP, attention DP on either and both sides (also several TP ranks per DP
 * group), and the refusals a valid MLA pair can hit. The exhaustive grid is {@link MlaFormatterConformanceTest}.
 *
 * <p>Refused pairs whose "good" follow-up (the context layout talking to itself) this formatter also refuses
 * (context CP) or that need the standard formatter (MHA) are covered by {@link MlaSupportTest} and
 * {@link MlaFormatterConformanceTest} instead.
 */
class MlaTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        LayoutGrid.Builder b = LayoutGrid.builder().attentionType(AttentionType.MLA).heads(1).kvFactor(null)
                .layers(5).dataTypes(DataType.FLOAT16, DataType.INT8, DataType.BFLOAT16);
        b.pair(Side.of(2, 1), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(1, 2), Side.of(2, 1));
        b.pair(Side.of(2, 2), Side.of(1, 4));
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(2, 1), Side.of(1, 2).cp(4));
        b.pair(Side.of(2, 1).dp(2), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(2, 1).dp(2));
        b.pair(Side.of(4, 1).dp(4), Side.of(2, 2).dp(2).cp(2));
        b.pair(Side.of(4, 1), Side.of(4, 1).dp(2));
        b.pair(Side.of(2, 2).layers(5, 0), Side.of(1, 1).cp(2));
        b.layers(10);
        b.pair(Side.of(1, 4), Side.of(4, 1).dp(4));
        b.layers(5).dataType(DataType.FLOAT16);
        CacheState base = b.state(Side.of(1, 1));
        b.unsupported("dataType", base, b.copy().dataType(DataType.BFLOAT16).state(Side.of(1, 1)));
        b.unsupported("tokensPerBlock", base, b.copy().tokensPerBlock(32).state(Side.of(2, 1)));
        b.unsupported("sizePerHead", base, b.copy().sizePerHead(8).state(Side.of(1, 2)));
        b.unsupported("layers", base, b.copy().layers(6).state(Side.of(1, 1)));
        return b.build();
    }
}
