package dev.kvtransfer.testkit;

/**
 * The verification pattern of DESIGN §6 under the testkit's name: every method, constant and
 * {@link dev.kvtransfer.core.pattern.KvPattern.Result} of {@link dev.kvtransfer.core.pattern.KvPattern}, which
 * holds the implementation (in core, so that tools verify without the testkit on their class path).
 */
public final class KvPattern extends dev.kvtransfer.core.pattern.KvPattern {
    private KvPattern() {
    }
}
