package dev.kvtransfer.fuzz;

import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

import java.io.PrintWriter;

import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

/**
 * Runs one fuzz target in its own JVM for {@code scripts/fuzz.sh}: {@code FuzzMain <class>#<method> <seconds>}
 * (with {@code JAZZER_FUZZ=1} in the environment for fuzzing mode). Exit status 0 when no finding, 1 otherwise.
 */
public final class FuzzMain {
    private FuzzMain() {
    }

    /**
     * @param args the target and the seconds to fuzz it
     */
    public static void main(String[] args) throws ClassNotFoundException {
        String target = args[0];
        Class<?> type = Class.forName(target.substring(0, target.indexOf('#')));
        String name = target.substring(target.indexOf('#') + 1);
        java.lang.reflect.Method method = java.util.Arrays.stream(type.getDeclaredMethods())
                .filter(m -> m.getName().equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no method " + target));
        long seconds = Long.parseLong(args[1]);
        LauncherDiscoveryRequest request = LauncherDiscoveryRequestBuilder.request()
                .selectors(selectMethod(type, method))
                .configurationParameter("jazzer.internal.arg.0", "fuzz")
                .configurationParameter("jazzer.internal.arg.1", "-max_total_time=" + seconds)
                .configurationParameter("jazzer.internal.arg.2", "-timeout=30")
                .build();
        Launcher launcher = LauncherFactory.create();
        SummaryGeneratingListener summary = new SummaryGeneratingListener();
        launcher.execute(request, summary);
        TestExecutionSummary s = summary.getSummary();
        s.printTo(new PrintWriter(System.out));
        s.printFailuresTo(new PrintWriter(System.out), 30);
        System.out.println("FUZZ-RESULT " + target + " found=" + s.getTotalFailureCount() + " tests="
                + s.getTestsFoundCount());
        System.exit(s.getTotalFailureCount() == 0 && s.getTestsFoundCount() > 0 ? 0 : 1);
    }
}
