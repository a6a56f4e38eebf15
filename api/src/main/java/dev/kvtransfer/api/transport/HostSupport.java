package dev.kvtransfer.api.transport;

import java.util.Map;

/**
 * Something the processes of one host share for a transport (Aeron's media driver for IPC between processes),
 * started by whoever starts the processes ({@link TransportProvider#startHostSupport}) and closed after them.
 */
public interface HostSupport extends AutoCloseable {
    /** @return transport properties every process of this host must be given (e.g. the shared driver's directory) */
    Map<String, String> properties();

    /** @return one line for the user: what was started, where */
    String describe();

    /** Stops what was started (bounded). Idempotent. */
    @Override
    void close();
}
