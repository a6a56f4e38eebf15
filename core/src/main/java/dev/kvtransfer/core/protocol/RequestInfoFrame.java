package dev.kvtransfer.core.protocol;

/**
 * The request info frame, generation to context on the request's data tag (the header's info tag) right after its
 * {@link RequestHeaderFlyweight}: {@code [RequestInfo wire bytes][MAC]}. The request info is the api's versioned
 * wire format ({@code RequestInfo.writeTo} / {@code fromBytes}); the MAC ({@code macBytes}, 0 without
 * authentication) is HMAC-SHA256 over the info and the receiving rank's address ({@code ControlAuth}). The header's
 * info length is the frame's length.
 */
public final class RequestInfoFrame {
    private RequestInfoFrame() {
    }

    /**
     * @param infoBytes bytes of the encoded request info
     * @param macBytes  MAC length
     * @return the frame's length
     */
    public static int length(int infoBytes, int macBytes) {
        return infoBytes + macBytes;
    }

    /**
     * @param frameLength the frame's length
     * @param macBytes    MAC length
     * @return bytes of the request info inside it (the MAC starts there)
     */
    public static int infoLength(int frameLength, int macBytes) {
        return frameLength - macBytes;
    }
}
