package dev.kvtransfer.memory.cuda;

import org.junit.jupiter.api.extension.ExtendWith;

import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Runs the annotated test (class) only where a CUDA device is usable; elsewhere JUnit reports it skipped with
 * the provider's {@code unavailabilityCause()}. With {@code -D}{@value CudaConditions#REQUIRE_PROPERTY}{@code =true}
 * (set by {@code scripts/gpu-check.sh}) it always runs, so a GPU machine whose CUDA is broken fails loudly
 * instead of skipping.
 */
@Target({ElementType.TYPE, ElementType.METHOD})
@Retention(RetentionPolicy.RUNTIME)
@Inherited
@ExtendWith(CudaConditions.DeviceRequired.class)
public @interface RequiresCudaDevice {
}
