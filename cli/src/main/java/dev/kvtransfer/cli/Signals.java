package dev.kvtransfer.cli;

/**
 * SIGTERM / SIGINT for a long-running command: instead of the JVM's default (run the shutdown hooks, exit 143),
 * the command is told, drains and returns its own exit status (0 after a clean drain). Where the JVM does not let
 * a handler be installed (a signal already taken, e.g. by {@code -Xrs}), the default stays.
 */
final class Signals {
    private Signals() {
    }

    /**
     * @param action what to run, on the JVM's signal thread, when SIGTERM or SIGINT arrives (keep it short)
     */
    @SuppressWarnings("restriction")
    static void onTermination(Runnable action) {
        for (String name : new String[] {"TERM", "INT"}) {
            try {
                sun.misc.Signal.handle(new sun.misc.Signal(name), s -> action.run());
            } catch (IllegalArgumentException e) {
                System.err.println("kvtransfer: cannot take SIG" + name + " (" + e.getMessage()
                        + "): it ends the process without draining");
            }
        }
    }
}
