package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.List;
import java.util.Set;
import java.util.function.BiFunction;

/** A formatter that forwards every call to another: the broken-formatter tests override only what they break. */
abstract class ForwardingFormatter implements CacheFormatter {
    protected final CacheFormatter inner;

    ForwardingFormatter(CacheFormatter inner) {
        this.inner = inner;
    }

    /**
     * @param name    the provider's name
     * @param factory builds the (broken) formatter of one rank
     * @return a provider of standard-attention formatters made by {@code factory}
     */
    static FormatterProvider provider(String name,
                                      BiFunction<KvCacheView, TransferBufferPool, CacheFormatter> factory) {
        return new FormatterProvider() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public boolean handles(AttentionType type) {
                return type == AttentionType.DEFAULT;
            }

            @Override
            public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
                return factory.apply(cache, buffers);
            }
        };
    }

    @Override
    public Set<FormatterCapability> capabilities() {
        return inner.capabilities();
    }

    @Override
    public void format(TransferSession session) {
        inner.format(session);
    }

    @Override
    public void unformat(TransferSession session) {
        inner.unformat(session);
    }

    @Override
    public void format(TransferSession session, int firstLayer, int layers) {
        inner.format(session, firstLayer, layers);
    }

    @Override
    public void unformat(TransferSession session, int firstLayer, int layers) {
        inner.unformat(session, firstLayer, layers);
    }

    @Override
    public void push(TransferSession session, int firstLayer, int layers) {
        inner.push(session, firstLayer, layers);
    }

    @Override
    public Support inquireSupport(CacheState self, CacheState peer) {
        return inner.inquireSupport(self, peer);
    }

    @Override
    public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
        return inner.counterparts(self, selfIndex, peer);
    }

    @Override
    public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
        return inner.pickRecvConnections(self, selfIndex, peer);
    }

    @Override
    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
        return inner.needSendCache(self, selfIndex, peer);
    }
}
