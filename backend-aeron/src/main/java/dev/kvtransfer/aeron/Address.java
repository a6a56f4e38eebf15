package dev.kvtransfer.aeron;

/**
 * A manager's address: {@code host:port} of its UDP subscription, followed, when it listens on IPC too, by
 * {@code /ipc/<driver id>/<stream>}: the identity of the media driver it uses and its IPC stream. A peer on a
 * driver with the same identity publishes {@code aeron:ipc} to that stream (shared memory, no socket); any other
 * peer uses UDP to {@code host:port}. Peers are keyed by {@code host:port}, so an address given without its IPC
 * part reaches the same peer (over UDP).
 *
 * @param text       the whole address
 * @param hostPort   {@code host:port}
 * @param host       the host
 * @param port       the UDP port
 * @param driverId   the driver identity, or null (no IPC)
 * @param ipcStream  the IPC stream, or 0 (no IPC)
 */
record Address(String text, String hostPort, String host, int port, String driverId, int ipcStream) {
    static final String IPC_PART = "/ipc/";

    static String format(String host, int port, String driverId, int ipcStream) {
        String hp = host + ":" + port;
        return driverId == null ? hp : hp + IPC_PART + driverId + "/" + ipcStream;
    }

    /**
     * Parses an address.
     *
     * @throws IllegalArgumentException when it is not {@code host:port[/ipc/<id>/<stream>]}
     */
    static Address parse(String text) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c <= 0x20 || c >= 0x7f) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text) + "': character "
                        + i + " (0x" + Integer.toHexString(c) + ") is not printable ASCII");
            }
        }
        String hp = text;
        String driverId = null;
        int stream = 0;
        int slash = text.indexOf(IPC_PART);
        if (slash >= 0) {
            hp = text.substring(0, slash);
            String rest = text.substring(slash + IPC_PART.length());
            int s = rest.lastIndexOf('/');
            if (s <= 0 || s == rest.length() - 1) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': expected host:port or host:port/ipc/<driver>/<stream>");
            }
            driverId = rest.substring(0, s);
            try {
                stream = Integer.parseInt(rest.substring(s + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': the IPC stream is not a number");
            }
        }
        int colon = hp.lastIndexOf(':');
        if (colon <= 0 || colon == hp.length() - 1) {
            throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text) + "': expected host:port");
        }
        int port;
        try {
            port = Integer.parseInt(hp.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text) + "': the port is not a"
                    + " number");
        }
        if (port <= 0 || port > 65535) {
            throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text) + "': port " + port
                    + " outside [1, 65535]");
        }
        return new Address(text, hp, hp.substring(0, colon), port, driverId, stream);
    }

    /** @return {@code host:port} of an address, or the text itself when it has no IPC part */
    static String hostPortOf(String text) {
        int slash = text.indexOf(IPC_PART);
        return slash < 0 ? text : text.substring(0, slash);
    }
}
