package dev.kvtransfer.ucx;

import java.net.InetSocketAddress;

/** A manager's address ({@code host:port}, IPv6 hosts in brackets): formatting and strict parsing. */
final class UcxAddresses {
    /** Longest address accepted from a peer. */
    static final int MAX_LENGTH = 256;

    private UcxAddresses() {
    }

    static String format(String host, int port) {
        return (host.indexOf(':') >= 0 && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + port;
    }

    /**
     * Checks an address's form without resolving it (for addresses peers claim).
     *
     * @param address the claimed address
     * @return what is wrong, or null
     */
    static String syntaxError(String address) {
        if (address.isEmpty() || address.length() > MAX_LENGTH) {
            return "empty or longer than " + MAX_LENGTH + " characters";
        }
        int colon = address.lastIndexOf(':');
        if (colon <= 0 || colon == address.length() - 1) {
            return "expected host:port";
        }
        for (int i = 0; i < colon; i++) {
            char ch = address.charAt(i);
            if (!(Character.isLetterOrDigit(ch) || ch == '.' || ch == '-' || ch == ':' || ch == '[' || ch == ']'
                    || ch == '_' || ch == '%')) {
                return "host has character " + (int) ch;
            }
        }
        try {
            int port = Integer.parseInt(address.substring(colon + 1));
            return port > 0 && port <= 65535 ? null : "port " + port + " out of range";
        } catch (NumberFormatException e) {
            return "port is not a number";
        }
    }

    /** @return whether two addresses name the same socket address (resolved; false when either does not parse) */
    static boolean sameEndpoint(String a, String b) {
        if (a.equals(b)) {
            return true;
        }
        try {
            return parse(a).equals(parse(b));
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    /**
     * @param address {@code host:port}
     * @return the resolved socket address
     * @throws IllegalArgumentException saying what is wrong
     */
    static InetSocketAddress parse(String address) {
        if (address.length() > MAX_LENGTH) {
            throw new IllegalArgumentException("longer than " + MAX_LENGTH + " characters");
        }
        int colon = address.lastIndexOf(':');
        if (colon <= 0 || colon == address.length() - 1) {
            throw new IllegalArgumentException("expected host:port");
        }
        String host = address.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(address.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("port is not a number");
        }
        if (port <= 0 || port > 65535) {
            throw new IllegalArgumentException("port " + port + " out of range");
        }
        InetSocketAddress a = new InetSocketAddress(host, port);
        if (a.isUnresolved()) {
            throw new IllegalArgumentException("host '" + host + "' does not resolve");
        }
        return a;
    }
}
