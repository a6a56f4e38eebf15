package dev.kvtransfer.core.transfer;

/**
 * Peer-supplied text in errors: cut to {@value #MAX_CHARS} characters (a peer controls its length), with control
 * characters replaced, so a hostile peer can neither flood the logs nor forge log lines.
 */
public final class Texts {
    /** Longest peer-supplied string kept in an error message. */
    public static final int MAX_CHARS = 256;

    private Texts() {
    }

    /** Longest peer-supplied reason (a refusal's text, which may describe two layouts) kept in an error. */
    public static final int MAX_REASON_CHARS = 4096;

    /**
     * @param s a peer-supplied string (an address), may be null
     * @return the string, at most {@value #MAX_CHARS} characters of it, control characters as '?'
     */
    public static String peer(String s) {
        return cut(s, MAX_CHARS);
    }

    /**
     * @param s a peer-supplied reason, may be null
     * @return the reason, at most {@value #MAX_REASON_CHARS} characters of it, control characters as '?'
     */
    public static String reason(String s) {
        return cut(s, MAX_REASON_CHARS);
    }

    /** Most elements of a block key written into an error. */
    static final int MAX_KEY_ELEMENTS = 8;

    /**
     * @param key a block key (a peer's, any length)
     * @return its elements, the first {@value #MAX_KEY_ELEMENTS} of a longer one and its length
     */
    static String key(long[] key) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < Math.min(key.length, MAX_KEY_ELEMENTS); i++) {
            b.append(i == 0 ? "" : ", ").append(key[i]);
        }
        if (key.length > MAX_KEY_ELEMENTS) {
            b.append(", ...(").append(key.length).append(" elements)");
        }
        return b.append(']').toString();
    }

    private static String cut(String s, int max) {
        if (s == null) {
            return "null";
        }
        int n = Math.min(s.length(), max);
        StringBuilder b = new StringBuilder(n + 16);
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            b.append(Character.isISOControl(c) ? '?' : c);
        }
        if (s.length() > max) {
            b.append("...(").append(s.length()).append(" chars)");
        }
        return b.toString();
    }

    /**
     * The UTF-8 bytes of an address, for a MAC. Remembered (addresses repeat in every request); callers only read
     * the array.
     */
    static byte[] utf8(String s) {
        byte[] b = UTF8.get(s);
        if (b == null) {
            b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            if (UTF8.size() >= MAX_UTF8) {
                UTF8.clear();
            }
            UTF8.put(s, b);
        }
        return b;
    }

    private static final int MAX_UTF8 = 4096;
    private static final java.util.Map<String, byte[]> UTF8 = new java.util.concurrent.ConcurrentHashMap<>();
}
