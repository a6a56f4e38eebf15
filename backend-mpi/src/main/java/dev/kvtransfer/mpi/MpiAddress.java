package dev.kvtransfer.mpi;

/**
 * The address of one endpoint. A process may hold several endpoints (one per open manager), numbered from 0 in
 * creation order and never reused, so a message can never reach a later manager that happens to live in the same
 * process. Forms:
 * <ul>
 *   <li>{@code "<world rank>"}: endpoint 0 of that rank of this world (the first manager its process created), and
 *       {@code "<world rank>/<endpoint>"}: what the processes of one {@code mpirun} job print and use, so a
 *       launcher-started program with one manager per process addresses its ranks by number;</li>
 *   <li>{@code "<world rank>/<endpoint>@<world id>"}, plus {@code "~<port>"} for a process that accepts
 *       connections from other MPI worlds ({@link MpiLinks}): what a process {@code mpirun} did not start (a
 *       singleton, e.g. a child JVM of a rank) prints, since its world is its own. The world id
 *       ({@link MpiRuntime#worldId()}) tells such an endpoint from one of this job.</li>
 * </ul>
 *
 * @param rank     world rank of the process (in its own world)
 * @param endpoint endpoint id inside the process
 * @param world    the world id, or null for this world
 * @param port     the MPI port of a listening process of another world, or null
 */
record MpiAddress(int rank, int endpoint, String world, String port) {
    /**
     * Parses an address.
     *
     * @param address   the text
     * @param worldSize number of ranks in this process's {@code MPI_COMM_WORLD}
     * @param worldId   this process's world id
     * @return the address ({@code world} null when it is this world)
     * @throws IllegalArgumentException naming the address when it is not of this transport or out of range
     */
    static MpiAddress parse(String address, int worldSize, String worldId) {
        String a = address.trim();
        String port = null;
        int tilde = a.indexOf('~');
        if (tilde >= 0) {
            port = a.substring(tilde + 1);
            a = a.substring(0, tilde);
        }
        String world = null;
        int at = a.indexOf('@');
        if (at >= 0) {
            world = a.substring(at + 1);
            a = a.substring(0, at);
            if (world.equals(worldId)) {
                world = null;
            } else if (!world.matches("[0-9a-f]{8}")) {
                throw new IllegalArgumentException("MPI address '" + shorten(address) + "': world id '" + shorten(world)
                        + "' is not 8 hex digits");
            }
        }
        int slash = a.indexOf('/');
        int rank;
        int endpoint;
        try {
            rank = Integer.parseInt(slash < 0 ? a : a.substring(0, slash));
            endpoint = slash < 0 ? 0 : Integer.parseInt(a.substring(slash + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("MPI address '" + shorten(address) + "': expected <world rank>/"
                    + "<endpoint>@<world id> (or a bare world rank)");
        }
        if (rank < 0 || (world == null && rank >= worldSize)) {
            throw new IllegalArgumentException("MPI address '" + shorten(address) + "': rank " + rank
                    + " is outside MPI_COMM_WORLD (size " + worldSize + ")");
        }
        if (endpoint < 0) {
            throw new IllegalArgumentException("MPI address '" + shorten(address) + "': endpoint " + endpoint
                    + " is negative");
        }
        return new MpiAddress(rank, endpoint, world, port);
    }

    static String format(int rank, int endpoint, String world, String port) {
        return rank + "/" + endpoint + "@" + world + (port == null ? "" : "~" + port);
    }

    /** Peer-supplied text in errors is cut to 256 characters. */
    static String shorten(String s) {
        return s.length() <= 256 ? s : s.substring(0, 256) + "...(" + s.length() + " chars)";
    }
}
