package dev.kvtransfer.memory.cuda;

import org.junit.jupiter.api.extension.ConditionEvaluationResult;
import org.junit.jupiter.api.extension.ExecutionCondition;
import org.junit.jupiter.api.extension.ExtensionContext;

/** The JUnit conditions behind {@link RequiresCudaDevice} and {@link RequiresNoCuda}. */
final class CudaConditions {
    /** System property: GPU tests must run (and fail) rather than skip. */
    static final String REQUIRE_PROPERTY = "kvtransfer.cuda.required";

    private CudaConditions() {
    }

    /** Enabled where a device is usable, or when {@value #REQUIRE_PROPERTY} is set. */
    static final class DeviceRequired implements ExecutionCondition {
        @Override
        public ConditionEvaluationResult evaluateExecutionCondition(ExtensionContext context) {
            CudaMemoryProvider p = new CudaMemoryProvider();
            if (p.isAvailable()) {
                return ConditionEvaluationResult.enabled("CUDA available: " + p.deviceCount() + " device(s)");
            }
            if (Boolean.getBoolean(REQUIRE_PROPERTY)) {
                return ConditionEvaluationResult.enabled(REQUIRE_PROPERTY + " is set although CUDA is unavailable ("
                        + p.unavailabilityCause() + "): running, to fail");
            }
            return ConditionEvaluationResult.disabled("no usable CUDA device: " + p.unavailabilityCause());
        }
    }

    /** Enabled where CUDA is not usable. */
    static final class NoCudaRequired implements ExecutionCondition {
        @Override
        public ConditionEvaluationResult evaluateExecutionCondition(ExtensionContext context) {
            CudaMemoryProvider p = new CudaMemoryProvider();
            return p.isAvailable()
                    ? ConditionEvaluationResult.disabled("CUDA is available here (" + p.deviceCount()
                    + " device(s)); this test checks the unavailable path")
                    : ConditionEvaluationResult.enabled("CUDA unavailable: " + p.unavailabilityCause());
        }
    }
}
