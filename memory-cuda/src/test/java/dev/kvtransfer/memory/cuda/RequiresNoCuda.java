package dev.kvtransfer.memory.cuda;

import org.junit.jupiter.api.extension.ExtendWith;

import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Runs the annotated test only where CUDA is not usable (it checks the unavailable path); where a device works,
 * JUnit reports it skipped, saying so.
 */
@Target({ElementType.TYPE, ElementType.METHOD})
@Retention(RetentionPolicy.RUNTIME)
@Inherited
@ExtendWith(CudaConditions.NoCudaRequired.class)
public @interface RequiresNoCuda {
}
