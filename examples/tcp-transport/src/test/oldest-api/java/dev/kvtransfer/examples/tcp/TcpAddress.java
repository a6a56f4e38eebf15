package dev.kvtransfer.examples.tcp;

import java.net.InetSocketAddress;

/** Addresses of the tcp transport: {@code tcp://host:port} ({@code tcp://[v6]:port} for IPv6 literals). */
final class TcpAddress {
    static final String SCHEME = "tcp://";

    private TcpAddress() {
    }

    static String format(String host, int port) {
        return SCHEME + (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
    }

    /**
     * @param address a {@code tcp://host:port} address
     * @return the socket address (unresolved names are resolved here)
     * @throws IllegalArgumentException naming the address when it is not one
     */
    static InetSocketAddress parse(String address) {
        if (!address.startsWith(SCHEME)) {
            throw new IllegalArgumentException("not a tcp transport address (tcp://host:port): '" + address + "'");
        }
        String rest = address.substring(SCHEME.length());
        int colon = rest.lastIndexOf(':');
        if (colon <= 0 || colon == rest.length() - 1) {
            throw new IllegalArgumentException("not a tcp transport address (tcp://host:port): '" + address + "'");
        }
        String host = rest.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(rest.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad port in tcp transport address '" + address + "'");
        }
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("port out of range in tcp transport address '" + address + "'");
        }
        return new InetSocketAddress(host, port);
    }
}
