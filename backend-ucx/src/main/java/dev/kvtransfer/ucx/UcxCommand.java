package dev.kvtransfer.ucx;

/** Work for the progress agent, queued by any thread and run on the agent's thread, in queue order. */
interface UcxCommand {
    /** Runs on the progress agent's thread. */
    void run();

    /**
     * Called instead of {@link #run()} when the manager closed first.
     *
     * @param f the closing failure
     */
    void abort(UcxFailure f);
}
