package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.model.CacheState;

import java.util.List;
import java.util.Set;

/** A formatter that forwards every call to another: the broken-formatter tests override only what they break. */
abstract class ForwardingFormatter implements CacheFormatter {
    protected final CacheFormatter inner;

    ForwardingFormatter(CacheFormatter inner) {
        this.inner = inner;
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
