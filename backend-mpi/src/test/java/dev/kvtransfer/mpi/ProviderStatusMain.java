package dev.kvtransfer.mpi;

/** Prints the provider's availability; run in a child JVM by {@link MpiTransportProviderTest}. */
public final class ProviderStatusMain {
    private ProviderStatusMain() {
    }

    /**
     * Prints {@code available=<bool> cause=<text>}.
     *
     * @param args unused
     */
    public static void main(String[] args) {
        MpiTransportProvider p = new MpiTransportProvider();
        System.out.println("available=" + p.isAvailable() + " cause=" + p.unavailabilityCause());
    }
}
