package dev.kvtransfer.registry;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Authenticates the HTTP control plane (registry and instance control endpoints) with the deployment secret, as
 * core's {@code ControlAuth} does the transfer control plane: HMAC-SHA256 with a key derived from the secret for
 * this purpose only ({@code kvtransfer-http-control-v1}, so an HTTP MAC never equals a transfer-plane one), over
 * the method, the path, a timestamp, a fresh nonce and the SHA-256 of the body. The header is
 * {@value #HEADER}: {@code KVT1 ts=<epoch ms>,nonce=<32 hex>,mac=<64 hex>}. A request further than
 * {@value #WINDOW_MILLIS} ms from this clock, a nonce seen within that window, or a wrong MAC is refused and
 * counted ({@link #refused()}). {@link #OFF} (no secret) signs nothing and accepts everything. Thread-safe.
 */
public final class RegistryAuth {
    /** The request header carrying the signature. */
    public static final String HEADER = "X-Kvtransfer-Auth";
    /** Clock skew accepted, and how long a nonce is remembered. */
    public static final long WINDOW_MILLIS = 120_000;
    /** Nonces remembered at most (older ones are dropped first; a flood cannot grow memory). */
    static final int MAX_NONCES = 1 << 18;

    /** No authentication. */
    public static final RegistryAuth OFF = new RegistryAuth(null);

    private final byte[] key;
    private final SecureRandom random = new SecureRandom();
    private final LinkedHashMap<String, Long> nonces = new LinkedHashMap<>();
    private final AtomicLong refused = new AtomicLong();

    private RegistryAuth(byte[] secret) {
        this.key = secret == null ? null : hmac(secret, "kvtransfer-http-control-v1".getBytes(StandardCharsets.UTF_8));
    }

    /**
     * @param secret the deployment secret (at least 16 bytes), or null for none
     * @return the authenticator
     */
    public static RegistryAuth of(byte[] secret) {
        if (secret != null && secret.length < 16) {
            throw new IllegalArgumentException("deployment secret holds " + secret.length
                    + " bytes, a secret needs at least 16");
        }
        return secret == null ? OFF : new RegistryAuth(secret.clone());
    }

    /** @return whether requests are signed and checked */
    public boolean enabled() {
        return key != null;
    }

    /**
     * The header value for one request.
     *
     * @param method HTTP method
     * @param path   the request path (no query)
     * @param body   the body bytes (empty for none)
     * @return the value of {@value #HEADER}, or empty when off
     */
    public String sign(String method, String path, byte[] body) {
        if (key == null) {
            return "";
        }
        long ts = System.currentTimeMillis();
        byte[] n = new byte[16];
        random.nextBytes(n);
        String nonce = HexFormat.of().formatHex(n);
        return "KVT1 ts=" + ts + ",nonce=" + nonce + ",mac=" + mac(method, path, ts, nonce, body);
    }

    /**
     * Checks one request's header.
     *
     * @param method HTTP method
     * @param path   the request path
     * @param body   the body
     * @param header the value of {@value #HEADER}, or null when absent
     * @return empty when accepted, else why it was refused (counted)
     */
    public String verify(String method, String path, byte[] body, String header) {
        if (key == null) {
            return "";
        }
        String why = check(method, path, body, header);
        if (!why.isEmpty()) {
            refused.incrementAndGet();
        }
        return why;
    }

    private String check(String method, String path, byte[] body, String header) {
        if (header == null || header.isBlank()) {
            return "no " + HEADER + " header: the request is not signed with the deployment secret";
        }
        if (!header.startsWith("KVT1 ")) {
            return HEADER + " is not a KVT1 signature";
        }
        Map<String, String> f = new LinkedHashMap<>();
        for (String part : header.substring(5).split(",")) {
            int eq = part.indexOf('=');
            if (eq > 0) {
                f.put(part.substring(0, eq).trim(), part.substring(eq + 1).trim());
            }
        }
        String tsText = f.get("ts");
        String nonce = f.get("nonce");
        String mac = f.get("mac");
        if (tsText == null || nonce == null || mac == null || !nonce.matches("[0-9a-f]{32}")
                || !mac.matches("[0-9a-f]{64}")) {
            return HEADER + " lacks ts, nonce or mac";
        }
        long ts;
        try {
            ts = Long.parseLong(tsText);
        } catch (NumberFormatException e) {
            return HEADER + " ts '" + tsText + "' is not a number";
        }
        long now = System.currentTimeMillis();
        if (Math.abs(now - ts) > WINDOW_MILLIS) {
            return "signature time " + ts + " is " + (now - ts) + " ms from this host's clock (window "
                    + WINDOW_MILLIS + " ms)";
        }
        byte[] expected = mac(method, path, ts, nonce, body).getBytes(StandardCharsets.US_ASCII);
        if (!MessageDigest.isEqual(expected, mac.getBytes(StandardCharsets.US_ASCII))) {
            return "wrong signature (another deployment secret?)";
        }
        synchronized (nonces) {
            for (Iterator<Map.Entry<String, Long>> it = nonces.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<String, Long> e = it.next();
                if (now - e.getValue() > WINDOW_MILLIS || nonces.size() >= MAX_NONCES) {
                    it.remove();
                } else {
                    break;
                }
            }
            if (nonces.putIfAbsent(nonce, now) != null) {
                return "replayed request (nonce seen before)";
            }
        }
        return "";
    }

    /**
     * The MAC of a stored entry (the etcd registry signs every value it writes, so an entry written without the
     * secret is never believed).
     *
     * @param payload the entry's bytes
     * @return hex MAC, or empty when off
     */
    public String seal(byte[] payload) {
        if (key == null) {
            return "";
        }
        byte[] domain = "kvtransfer-registry-entry-v1\n".getBytes(StandardCharsets.UTF_8);
        byte[] all = new byte[domain.length + payload.length];
        System.arraycopy(domain, 0, all, 0, domain.length);
        System.arraycopy(payload, 0, all, domain.length, payload.length);
        return HexFormat.of().formatHex(hmac(key, all));
    }

    /**
     * Checks a stored entry's MAC; a refusal is counted.
     *
     * @param payload the entry's bytes
     * @param mac     the MAC stored with it
     * @return whether it is genuine (always, when off)
     */
    public boolean unseal(byte[] payload, String mac) {
        if (key == null) {
            return true;
        }
        boolean ok = mac != null && MessageDigest.isEqual(seal(payload).getBytes(StandardCharsets.US_ASCII),
                mac.getBytes(StandardCharsets.US_ASCII));
        if (!ok) {
            refused.incrementAndGet();
        }
        return ok;
    }

    /** @return requests refused since start */
    public long refused() {
        return refused.get();
    }

    private String mac(String method, String path, long ts, String nonce, byte[] body) {
        byte[] bodyHash;
        try {
            bodyHash = MessageDigest.getInstance("SHA-256").digest(body);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("SHA-256 is missing from this JDK", e);
        }
        String text = method + "\n" + path + "\n" + ts + "\n" + nonce + "\n" + HexFormat.of().formatHex(bodyHash);
        return HexFormat.of().formatHex(hmac(key, text.getBytes(StandardCharsets.UTF_8)));
    }

    private static byte[] hmac(byte[] key, byte[] data) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(key, "HmacSHA256"));
            return m.doFinal(data);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is missing from this JDK", e);
        }
    }
}
