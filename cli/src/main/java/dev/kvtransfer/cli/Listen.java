package dev.kvtransfer.cli;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;

/**
 * A {@code --listen HOST[:PORT]} value: the address a long-running command binds (loopback unless another one is
 * named) and its base port (0: any free port).
 *
 * @param host the host to bind, as given (an IP address or a name this host resolves)
 * @param port the port, 0..65535
 */
record Listen(String host, int port) {
    /** What {@code --listen} defaults to: loopback, any free port. */
    static final String DEFAULT = "127.0.0.1:0";

    /**
     * @param option the option name, for messages
     * @param text   {@code HOST}, {@code HOST:PORT} or {@code [V6]:PORT}
     * @return the parsed value
     */
    static Listen parse(String option, String text) {
        String host = text;
        int port = 0;
        int colon = text.lastIndexOf(':');
        if (text.startsWith("[")) {
            int close = text.indexOf(']');
            if (close < 0) {
                throw new IllegalArgumentException(option + " " + text + ": missing ']'");
            }
            host = text.substring(1, close);
            if (close + 1 < text.length()) {
                port = port(option, text, text.substring(close + 2));
            }
        } else if (colon >= 0 && text.indexOf(':') == colon) {
            host = text.substring(0, colon);
            port = port(option, text, text.substring(colon + 1));
        }
        if (host.isBlank()) {
            throw new IllegalArgumentException(option + " " + text + ": name a host (127.0.0.1 for loopback)");
        }
        try {
            InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            throw new IllegalArgumentException(option + " " + text + ": unknown host '" + host + "'");
        }
        return new Listen(host, port);
    }

    private static int port(String option, String text, String p) {
        try {
            int v = Integer.parseInt(p);
            if (v < 0 || v > 65535) {
                throw new NumberFormatException();
            }
            return v;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(option + " " + text + ": port '" + p + "' is not 0..65535");
        }
    }

    /** @return the socket address of the base port */
    InetSocketAddress socket() {
        return new InetSocketAddress(host, port);
    }

    /** @return whether the address is a wildcard (0.0.0.0 / ::), which cannot be advertised to peers */
    boolean wildcard() {
        try {
            return InetAddress.getByName(host).isAnyLocalAddress();
        } catch (UnknownHostException e) {
            return false;
        }
    }
}
