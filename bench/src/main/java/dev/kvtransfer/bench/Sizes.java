package dev.kvtransfer.bench;

import java.util.Locale;

/** Byte counts on the command line ({@code 4k}, {@code 64m}, {@code 1g}, plain numbers) and in reports. */
public final class Sizes {
    private Sizes() {
    }

    /**
     * @param text a size: digits with an optional binary suffix k, m, g (KiB, MiB, GiB; {@code kib}, {@code mib}
     *             also accepted)
     * @return bytes
     * @throws IllegalArgumentException when it is not a positive size
     */
    public static long parse(String text) {
        String t = text.trim().toLowerCase(Locale.ROOT);
        if (t.endsWith("ib")) {
            t = t.substring(0, t.length() - 2);
        } else if (t.endsWith("b")) {
            t = t.substring(0, t.length() - 1);
        }
        long unit = 1;
        if (!t.isEmpty()) {
            char c = t.charAt(t.length() - 1);
            unit = switch (c) {
                case 'k' -> 1L << 10;
                case 'm' -> 1L << 20;
                case 'g' -> 1L << 30;
                default -> 1;
            };
            if (unit != 1) {
                t = t.substring(0, t.length() - 1);
            }
        }
        try {
            long v = Math.multiplyExact(Long.parseLong(t), unit);
            if (v < 1) {
                throw new IllegalArgumentException("size '" + text + "': must be positive");
            }
            return v;
        } catch (NumberFormatException | ArithmeticException e) {
            throw new IllegalArgumentException("size '" + text + "': expected digits with an optional k, m or g");
        }
    }

    /**
     * @param bytes a size
     * @return a short label: {@code 4 KiB}, {@code 64 MiB}, {@code 1.5 GiB}, {@code 123 B}
     */
    public static String label(long bytes) {
        if (bytes >= 1L << 30) {
            return trim(bytes / (double) (1L << 30)) + " GiB";
        }
        if (bytes >= 1L << 20) {
            return trim(bytes / (double) (1L << 20)) + " MiB";
        }
        if (bytes >= 1L << 10) {
            return trim(bytes / (double) (1L << 10)) + " KiB";
        }
        return bytes + " B";
    }

    private static String trim(double v) {
        if (v == Math.rint(v)) {
            return Long.toString((long) v);
        }
        return String.format(Locale.ROOT, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
    }
}
