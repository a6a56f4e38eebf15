package dev.kvtransfer.testkit;

import org.junit.jupiter.api.extension.ExtendWith;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Runs every rule (and every lifecycle method) of the annotated suite under a bound, with {@link RuleBounds}: a
 * plugin call that never returns fails the rule that made it, naming the call, with a dump of the stuck threads.
 * The suite's values are defaults; {@value RuleBounds#RULE_SECONDS_PROPERTY} and
 * {@value RuleBounds#SUITE_SECONDS_PROPERTY} (JUnit configuration parameters or system properties) override them.
 */
@Documented
@Inherited
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.TYPE)
@ExtendWith(RuleBounds.class)
public @interface RuleBound {
    /** @return the most seconds one rule, or one lifecycle method, may run */
    long seconds() default 180;

    /**
     * @return once a rule of the class has hung, the seconds (from the class's first rule) that all its rules
     *         together may take; later rules get what is left, and fail at once when nothing is
     */
    long suiteSeconds() default 420;
}
