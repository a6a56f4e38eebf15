package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

/** Internal: turns whatever a transfer thread caught into the request's {@link KvTransferException}. */
final class TransferErrors {
    private TransferErrors() {
    }

    static KvTransferException forRequest(Throwable e, long requestId, String doing) {
        if (e instanceof KvTransferException k) {
            return k.requestId() == requestId ? k
                    : new KvTransferException(k.code(), requestId, k.getMessage(), k);
        }
        return new KvTransferException(ErrorCode.INTERNAL, requestId, doing + " failed: " + e, e);
    }

    static ErrorCode codeOf(Throwable e) {
        return e instanceof KvTransferException k ? k.code() : ErrorCode.INTERNAL;
    }
}
