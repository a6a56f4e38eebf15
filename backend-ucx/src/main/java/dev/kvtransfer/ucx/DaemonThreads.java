package dev.kvtransfer.ucx;

import java.util.concurrent.ThreadFactory;

/** Thread factories of the transport's own threads: daemons, named (the leak checks and thread dumps read names). */
final class DaemonThreads {
    private DaemonThreads() {
    }

    static ThreadFactory named(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }
}
