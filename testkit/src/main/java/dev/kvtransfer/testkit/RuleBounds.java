package dev.kvtransfer.testkit;

import org.junit.jupiter.api.extension.DynamicTestInvocationContext;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.InvocationInterceptor;
import org.junit.jupiter.api.extension.ReflectiveInvocationContext;
import org.junit.platform.commons.support.AnnotationSupport;

import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The watchdog of {@link RuleBound}: each rule, dynamic test and lifecycle method runs on its own thread
 * ({@code testkit-rule-<name>}) and is given its bound. On expiry the rule fails with an {@link AssertionError}
 * that names the plugin call it is stuck in (the method the suite called, and the innermost plugin frame) and carries a dump of every
 * thread that is stuck in the suite's code or was started during the rule; the rule's threads are interrupted and
 * left behind (a call that ignores interrupts cannot be ended from Java; {@link LeakCheckExtension} then reports
 * them). Unlike JUnit's {@code @Timeout}, the bound shrinks to the suite's budget once a rule of the class has hung,
 * so a plugin that hangs in every rule still ends its suite within the budget (plus one rule bound).
 */
public final class RuleBounds implements InvocationInterceptor {
    /** Configuration parameter or system property: seconds per rule (overrides {@link RuleBound#seconds()}). */
    public static final String RULE_SECONDS_PROPERTY = "kvtransfer.testkit.ruleTimeoutSeconds";
    /** Configuration parameter or system property: the suite's budget once a rule hung, in seconds. */
    public static final String SUITE_SECONDS_PROPERTY = "kvtransfer.testkit.suiteBudgetSeconds";
    /** Cleanup gets at least this long even when the budget is spent, so managers can still be closed. */
    static final Duration LIFECYCLE_FLOOR = Duration.ofSeconds(10);
    private static final int DUMP_FRAMES = 24;

    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(RuleBounds.class);

    /** Per test class: when its first rule started and which rules hung. */
    private static final class ClassState {
        final long startNanos = System.nanoTime();
        final List<String> hung = new CopyOnWriteArrayList<>();
    }

    @Override
    public void interceptTestMethod(Invocation<Void> invocation, ReflectiveInvocationContext<Method> invocationContext,
                                    ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), false);
    }

    @Override
    public <T> T interceptTestFactoryMethod(Invocation<T> invocation,
                                            ReflectiveInvocationContext<Method> invocationContext,
                                            ExtensionContext extensionContext) throws Throwable {
        return bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), false);
    }

    @Override
    public void interceptDynamicTest(Invocation<Void> invocation, DynamicTestInvocationContext invocationContext,
                                     ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, extensionContext.getDisplayName(), false);
    }

    @Override
    public void interceptBeforeAllMethod(Invocation<Void> invocation,
                                         ReflectiveInvocationContext<Method> invocationContext,
                                         ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), true);
    }

    @Override
    public void interceptBeforeEachMethod(Invocation<Void> invocation,
                                          ReflectiveInvocationContext<Method> invocationContext,
                                          ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), true);
    }

    @Override
    public void interceptAfterEachMethod(Invocation<Void> invocation,
                                         ReflectiveInvocationContext<Method> invocationContext,
                                         ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), true);
    }

    @Override
    public void interceptAfterAllMethod(Invocation<Void> invocation,
                                        ReflectiveInvocationContext<Method> invocationContext,
                                        ExtensionContext extensionContext) throws Throwable {
        bounded(invocation, extensionContext, invocationContext.getExecutable().getName(), true);
    }

    private static <T> T bounded(Invocation<T> invocation, ExtensionContext context, String name, boolean lifecycle)
            throws Throwable {
        // A dynamic test's own context has no test class: its class context has.
        ExtensionContext classContext = classContext(context);
        Class<?> suite = classContext.getTestClass().orElseThrow(() -> new IllegalStateException(
                "no test class above " + context.getUniqueId()));
        RuleBound limits = AnnotationSupport.findAnnotation(suite, RuleBound.class).orElse(null);
        Duration rule = Duration.ofSeconds(seconds(context, RULE_SECONDS_PROPERTY,
                limits == null ? 180 : limits.seconds()));
        Duration budget = Duration.ofSeconds(seconds(context, SUITE_SECONDS_PROPERTY,
                limits == null ? 420 : limits.suiteSeconds()));
        ClassState state = classContext.getStore(NS).getOrComputeIfAbsent(ClassState.class);
        Duration bound = rule;
        if (!state.hung.isEmpty()) {
            Duration left = budget.minusNanos(System.nanoTime() - state.startNanos);
            if (lifecycle) {
                left = left.compareTo(LIFECYCLE_FLOOR) < 0 ? LIFECYCLE_FLOOR : left;
            } else if (left.isNegative() || left.isZero()) {
                throw new AssertionError(name + " not run: the suite's budget of " + budget.toSeconds() + " s ("
                        + SUITE_SECONDS_PROPERTY + ") is spent since " + state.hung + " hung");
            }
            bound = left.compareTo(rule) < 0 ? left : rule;
        }
        Set<Thread> before = new HashSet<>(Thread.getAllStackTraces().keySet());
        AtomicReference<T> result = new AtomicReference<>();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread runner = new Thread(() -> {
            try {
                result.set(invocation.proceed());
            } catch (Throwable t) {
                failure.set(t);
            }
        }, "testkit-rule-" + name);
        runner.setDaemon(true);
        runner.start();
        runner.join(Math.max(1, bound.toMillis()));
        if (runner.isAlive()) {
            state.hung.add(name);
            String report = stuckReport(suite, runner, before);
            runner.interrupt();
            System.err.println(report);
            throw new AssertionError(name + " did not end within its bound of " + bound.toMillis() + " ms ("
                    + RULE_SECONDS_PROPERTY + " / " + SUITE_SECONDS_PROPERTY + "): " + report);
        }
        Throwable t = failure.get();
        if (t != null) {
            throw t;
        }
        return result.get();
    }

    private static long seconds(ExtensionContext context, String key, long fallback) {
        String v = context.getConfigurationParameter(key).orElse(System.getProperty(key));
        if (v == null || v.isBlank()) {
            return fallback;
        }
        try {
            long s = Long.parseLong(v.trim());
            if (s <= 0) {
                throw new NumberFormatException("not positive");
            }
            return s;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + " = '" + v + "': must be a positive number of seconds", e);
        }
    }

    private static ExtensionContext classContext(ExtensionContext c) {
        ExtensionContext x = c;
        while (!(x.getElement().isPresent() && x.getElement().get() instanceof Class<?>) && x.getParent().isPresent()) {
            x = x.getParent().get();
        }
        return x;
    }

    /**
     * Which call each stuck thread is in, and their stacks: the rule's own thread, every thread whose stack is in
     * the suite's code (the rule's helper threads), and every thread started during the rule (the plugin's).
     */
    static String stuckReport(Class<?> suite, Thread runner, Set<Thread> before) {
        Set<String> suiteClasses = new HashSet<>();
        for (Class<?> c = suite; c != null && c != Object.class; c = c.getSuperclass()) {
            suiteClasses.add(c.getName());
        }
        StringBuilder calls = new StringBuilder();
        StringBuilder dump = new StringBuilder();
        for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
            Thread t = e.getKey();
            StackTraceElement[] st = e.getValue();
            int boundary = firstSuiteFrame(st, suiteClasses);
            boolean mine = t == runner || (boundary > 0 && !t.getName().startsWith("testkit-rule-"));
            if (!mine && (before.contains(t) || !t.isAlive())) {
                continue;
            }
            if (boundary > 0) {
                StackTraceElement call = callOf(st, boundary);
                if (call != null) {
                    if (calls.length() > 0) {
                        calls.append("; ");
                    }
                    calls.append("thread '").append(t.getName()).append("' stuck in ").append(frame(call))
                            .append(" (innermost: ").append(frame(innermost(st, boundary))).append("), called from ")
                            .append(frame(st[boundary]));
                }
                if (mine && t != runner) {
                    t.interrupt();
                }
            }
            dump.append("\n\"").append(t.getName()).append("\" ").append(t.getState());
            for (int i = 0; i < Math.min(st.length, DUMP_FRAMES); i++) {
                dump.append("\n    at ").append(st[i]);
            }
            if (st.length > DUMP_FRAMES) {
                dump.append("\n    ... ").append(st.length - DUMP_FRAMES).append(" more");
            }
        }
        return (calls.length() == 0 ? "no thread is in a call the suite made" : calls)
                + "\nthreads of the rule:" + dump;
    }

    /** Index of the innermost frame that is the suite's own code (a rule or a lambda of it), or -1. */
    private static int firstSuiteFrame(StackTraceElement[] st, Set<String> suiteClasses) {
        for (int i = 0; i < st.length; i++) {
            String c = st[i].getClassName();
            for (int dollar = c.length(); dollar > 0; dollar = c.lastIndexOf('$', dollar - 1)) {
                // A rule's lambda or inner class ("Suite$1", "Suite$$Lambda") counts as the suite's own code.
                if (suiteClasses.contains(c.substring(0, dollar))) {
                    return i;
                }
            }
        }
        return -1;
    }

    /**
     * The call the suite made: the outermost frame below the suite's that is not the JDK's or JUnit's own (so a
     * rule waiting in {@code Future.get} on a helper thread names nothing, and the helper names the plugin).
     */
    private static StackTraceElement callOf(StackTraceElement[] st, int boundary) {
        List<StackTraceElement> below = new ArrayList<>();
        for (int i = boundary - 1; i >= 0; i--) {
            below.add(st[i]);
        }
        for (StackTraceElement f : below) {
            String c = f.getClassName();
            if (!(c.startsWith("java.") || c.startsWith("jdk.") || c.startsWith("sun.") || c.startsWith("org.junit.")
                    || c.startsWith("org.assertj.") || c.startsWith("org.awaitility."))) {
                return f;
            }
        }
        return null;
    }

    /** The innermost frame that is not the JDK's: where the plugin waits (its park or poll loop). */
    private static StackTraceElement innermost(StackTraceElement[] st, int boundary) {
        for (int i = 0; i < boundary; i++) {
            String c = st[i].getClassName();
            if (!(c.startsWith("java.") || c.startsWith("jdk.") || c.startsWith("sun."))) {
                return st[i];
            }
        }
        return st[0];
    }

    private static String frame(StackTraceElement f) {
        String c = f.getClassName();
        return c.substring(c.lastIndexOf('.') + 1) + "." + f.getMethodName() + "(" + f.getFileName() + ":"
                + f.getLineNumber() + ")";
    }
}
