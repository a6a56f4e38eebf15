package dev.kvtransfer.mpi;

/**
 * One check that {@link MpiCheckMain} runs on every rank of an {@code mpirun} job. Every rank calls
 * {@link #run} (ranks without a part return at once); the main synchronizes ranks between checks and fails
 * the job when any rank throws. Add a suite by listing implementations in {@link MpiCheckMain}, or pass
 * {@code --check-class fully.qualified.Name} (a public no-arg class) for checks living elsewhere, e.g. a
 * transceiver-level transfer.
 */
public interface MpiCheck {
    /** @return a short name printed in the job's output */
    String name();

    /** @return the fewest ranks the check needs; below it the main reports it as not applicable */
    default int minRanks() {
        return 2;
    }

    /**
     * Runs this rank's part.
     *
     * @param ctx the job context
     * @throws Exception on failure
     */
    void run(MpiCheckContext ctx) throws Exception;
}
