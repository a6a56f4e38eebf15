package dev.kvtransfer.aeron;

/**
 * A manager's address: {@code host:port} of its UDP subscription, then {@code /inc/<incarnation>} (16 hex digits:
 * random per manager start), then, when it listens on IPC too, {@code /ipc/<driver id>/<stream>}: the identity of
 * the media driver it uses and its IPC stream. A peer on a driver with the same identity publishes
 * {@code aeron:ipc} to that stream (shared memory, no socket); any other peer uses UDP to {@code host:port}. Peers
 * are keyed by {@code host:port}, so an address given without its other parts reaches the same peer (over UDP).
 *
 * <p>Why the incarnation: a HELLO names the address it is for and its MAC covers that text, so with a secret it is
 * valid for one start of the receiver only. A HELLO captured before a restart on the same port is refused by the
 * new manager, whose incarnation differs (docs/security.md, the HELLO replay).
 *
 * @param text        the whole address
 * @param hostPort    {@code host:port}
 * @param host        the host
 * @param port        the UDP port
 * @param incarnation the manager's incarnation, or 0 when the address does not say
 * @param driverId    the driver identity, or null (no IPC)
 * @param ipcStream   the IPC stream, or 0 (no IPC)
 */
record Address(String text, String hostPort, String host, int port, long incarnation, String driverId,
               int ipcStream) {
    static final String INC_PART = "/inc/";
    static final String IPC_PART = "/ipc/";

    static String format(String host, int port, long incarnation, String driverId, int ipcStream) {
        String hp = host + ":" + port + INC_PART + String.format("%016x", incarnation);
        return driverId == null ? hp : hp + IPC_PART + driverId + "/" + ipcStream;
    }

    /**
     * Parses an address.
     *
     * @throws IllegalArgumentException when it is not {@code host:port[/inc/<hex>][/ipc/<id>/<stream>]}
     */
    static Address parse(String text) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c <= 0x20 || c >= 0x7f) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text) + "': character "
                        + i + " (0x" + Integer.toHexString(c) + ") is not printable ASCII");
            }
        }
        int first = text.indexOf('/');
        String hp = first < 0 ? text : text.substring(0, first);
        String rest = first < 0 ? "" : text.substring(first);
        long incarnation = 0;
        if (rest.startsWith(INC_PART)) {
            int end = rest.indexOf('/', INC_PART.length());
            String hex = end < 0 ? rest.substring(INC_PART.length()) : rest.substring(INC_PART.length(), end);
            if (hex.isEmpty() || hex.length() > 16) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': the incarnation must be 1..16 hex digits");
            }
            try {
                incarnation = Long.parseUnsignedLong(hex, 16);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': the incarnation is not hexadecimal");
            }
            rest = end < 0 ? "" : rest.substring(end);
        }
        String driverId = null;
        int stream = 0;
        if (!rest.isEmpty()) {
            if (!rest.startsWith(IPC_PART)) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': expected host:port[/inc/<incarnation>][/ipc/<driver>/<stream>]");
            }
            rest = rest.substring(IPC_PART.length());
            int s = rest.lastIndexOf('/');
            if (s <= 0 || s == rest.length() - 1) {
                throw new IllegalArgumentException("address = '" + ErrorReporter.peerText(text)
                        + "': expected host:port[/inc/<incarnation>]/ipc/<driver>/<stream>");
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
        return new Address(text, hp, hp.substring(0, colon), port, incarnation, driverId, stream);
    }

    /** @return {@code host:port} of an address: the text before its first {@code /} */
    static String hostPortOf(String text) {
        int slash = text.indexOf('/');
        return slash < 0 ? text : text.substring(0, slash);
    }
}
