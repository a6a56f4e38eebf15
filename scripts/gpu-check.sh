#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU and driver but no JDK and no network, from the repository
# root, with the bundle that scripts/gpu-bundle.sh built on a build machine (target/gpu-bundle/, or $GPU_BUNDLE).
# In under 8 minutes it:
#   1. finds the GPU (nvidia-smi, /dev/nvidia*, /proc/driver/nvidia),
#   2. unpacks the bundle's Java runtime and runs the memory-cuda tests with the JUnit console launcher
#      (-Dkvtransfer.cuda.required=true: a GPU test that cannot reach CUDA fails instead of skipping),
#   3. prints device-to-device, host-to-device and device-to-host copy rates measured by CudaBufferManager,
#   4. runs the cli (with the bundle's cuda memory plugin on its class path): a host-pool demo as a baseline, then
#      the device-pool demos (llama3-8b over loopback and over Aeron with the generation instance in a second
#      process, and a small TP/PP/MLA grid), verify on, each printing its GB/s next to the D2D and D2H copy rates
#      of step 3; without a GPU it checks instead that --pool-memory device is refused with the plugin's cause,
# and prints a summary. Exit codes: 0 all passed (skips allowed), 1 a step failed, 3 no GPU here, 4 no bundle.
#
# Usage: scripts/gpu-check.sh [--without-gpu]
#   --without-gpu  for testing this script on a build machine: run every step although there is no GPU (GPU tests
#                  then skip, copy rates are not measured) and still exit 3
set -uo pipefail
cd "$(dirname "$0")/.."

EXIT_FAILED=1
EXIT_NO_GPU=3
EXIT_NO_BUNDLE=4
TOTAL_LIMIT_S="${GPU_CHECK_LIMIT_S:-460}" # leaves margin under 8 minutes
BUNDLE="${GPU_BUNDLE:-target/gpu-bundle}"
WITHOUT_GPU=0
case "${1:-}" in
    --without-gpu) WITHOUT_GPU=1 ;;
    "") ;;
    *) echo "gpu-check: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
esac

START_S="$(date +%s)"
STEPS=()
FAILED=0
say() { echo "gpu-check: $*"; }
elapsed() { echo $(( $(date +%s) - START_S )); }
record() { # STEP STATUS DETAIL
    STEPS+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && FAILED=1
    say "$2 $1${3:+: $3}"
}
summary() {
    echo
    echo "==== gpu-check summary ($(elapsed) s) ===="
    printf '%s\n' "${STEPS[@]}"
}
# run_for SECONDS CMD...: runs with a deadline (the smaller of SECONDS and what is left of the total).
run_for() {
    local want="$1"; shift
    local left=$(( TOTAL_LIMIT_S - $(elapsed) ))
    [ "$left" -lt "$want" ] && want="$left"
    if [ "$want" -le 5 ]; then
        echo "gpu-check: out of time (limit ${TOTAL_LIMIT_S} s)" >&2
        return 124
    fi
    if command -v timeout >/dev/null 2>&1; then
        timeout --kill-after=10 "$want" "$@"
    else
        "$@"
    fi
}

# ---- 1. the GPU ----
GPU_INFO=""
if command -v nvidia-smi >/dev/null 2>&1; then
    if GPU_INFO="$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1)"; then
        :
    else
        GPU_INFO=""
        NO_GPU_WHY="nvidia-smi is installed but failed: $(nvidia-smi -L 2>&1 | head -1)"
    fi
elif ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    GPU_INFO="$(ls /dev/nvidia[0-9]* | paste -sd' ' -) (no nvidia-smi)"
elif [ -r /proc/driver/nvidia/version ]; then
    GPU_INFO="$(head -1 /proc/driver/nvidia/version)"
fi
if [ -z "$GPU_INFO" ]; then
    WHY="${NO_GPU_WHY:-no nvidia-smi, no /dev/nvidia*, no /proc/driver/nvidia}"
    if [ "$WITHOUT_GPU" = 0 ]; then
        say "no GPU on this machine ($WHY): nothing to check"
        exit "$EXIT_NO_GPU"
    fi
    say "no GPU on this machine ($WHY); --without-gpu: running the steps anyway"
    record "gpu" SKIP "no GPU ($WHY)"
else
    say "GPU: $GPU_INFO"
    record "gpu" PASS "$(echo "$GPU_INFO" | head -1)"
fi

# ---- 2. the bundle and its runtime ----
if [ ! -f "$BUNDLE/runtime.tar.gz" ] || [ ! -f "$BUNDLE/classpath.txt" ]; then
    say "no bundle at $BUNDLE (build it on a build machine: scripts/gpu-bundle.sh; a device run carries it with"\
" carry=[\"target/gpu-bundle\"])"
    exit "$EXIT_NO_BUNDLE"
fi
[ -f "$BUNDLE/MANIFEST.txt" ] && sed -n '2p' "$BUNDLE/MANIFEST.txt" | sed 's/^/gpu-check: bundle /'
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
if ! tar -C "$WORK" -xzf "$BUNDLE/runtime.tar.gz"; then
    record "runtime" FAIL "could not unpack $BUNDLE/runtime.tar.gz"
    summary
    exit "$EXIT_NO_BUNDLE"
fi
JAVA="$WORK/runtime/bin/java"
if JV="$("$JAVA" -version 2>&1)"; then
    record "runtime" PASS "$(echo "$JV" | head -1)"
else
    record "runtime" FAIL "java -version: $JV"
    summary
    exit "$EXIT_FAILED"
fi
CPATH="$(sed "s#^#$BUNDLE/#" "$BUNDLE/classpath.txt" | paste -sd: -)"
CONSOLE="$(grep 'junit-platform-console-standalone' "$BUNDLE/classpath.txt" | head -1)"
CLI_JAR="$BUNDLE/$(grep '^cli/' "$BUNDLE/classpath.txt" | head -1)"
# JCuda unpacks its native libraries into java.io.tmpdir: keep them in our scratch directory.
JOPTS=(-Djava.io.tmpdir="$WORK" -XX:+UseParallelGC)

# ---- 3. memory-cuda tests ----
REQUIRED=true
[ -z "$GPU_INFO" ] && REQUIRED=false
say "memory-cuda tests (JUnit console launcher, kvtransfer.cuda.required=$REQUIRED) ..."
run_for 240 "$JAVA" "${JOPTS[@]}" -Dkvtransfer.cuda.required="$REQUIRED" -jar "$BUNDLE/$CONSOLE" execute \
    --disable-banner --disable-ansi-colors --details=tree --details-theme=ascii --fail-if-no-tests --reports-dir="$WORK/reports" \
    --class-path "$CPATH" --select-package dev.kvtransfer.memory.cuda > "$WORK/tests.out" 2>&1
rc=$?
cat "$WORK/tests.out"
count() { sed -n "s/^\[ *\([0-9]*\) tests $1 *\]$/\1/p" "$WORK/tests.out" | tail -1; }
DETAIL="$(count successful) passed, $(count failed) failed, $(count skipped) skipped"
if [ "$rc" = 0 ]; then
    record "memory-cuda tests" PASS "$DETAIL"
else
    record "memory-cuda tests" FAIL "$DETAIL (launcher exit $rc$([ "$rc" = 124 ] && echo ', timed out'))"
fi
# Say which were skipped and why (the tree marks them with the reason).
grep -F '[S]' "$WORK/tests.out" | sed -E "s/^[|+' -]*/  skipped: /" || true

# ---- 4. copy rates ----
if [ -n "$GPU_INFO" ]; then
    say "copy rates (CudaBufferManager, 1 GiB copies) ..."
    run_for 120 "$JAVA" "${JOPTS[@]}" -cp "$CPATH" dev.kvtransfer.memory.cuda.CudaCopyRates --mib 1024 \
        --iterations 20 > "$WORK/rates.out" 2>&1
    rc=$?
    cat "$WORK/rates.out"
    if [ "$rc" = 0 ]; then
        D2D_RATE="$(sed -nE 's#^copy-rate D2D +([0-9.]+) GB/s.*#\1#p' "$WORK/rates.out" | head -1)"
        D2H_RATE="$(sed -nE 's#^copy-rate D2H pinned +([0-9.]+) GB/s.*#\1#p' "$WORK/rates.out" | head -1)"
        record "copy rates" PASS "$(grep -E '^copy-rate (D2D|H2D pinned|D2H pinned) ' "$WORK/rates.out" \
            | sed -E 's#^copy-rate ([A-Za-z0-9 ]*[A-Za-z0-9]) +([0-9.]+) GB/s.*#\1 \2 GB/s#' | paste -sd, -)"
    else
        record "copy rates" FAIL "CudaCopyRates exit $rc"
    fi
else
    record "copy rates" SKIP "no GPU"
fi

# ---- 5. the cli ----
CLI_FLAGS=(
    --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
    --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED --add-exports=java.base/sun.nio.ch=ALL-UNNAMED
    --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED
    -Dchronicle.analytics.disable=true
)
# The cuda memory plugin (memory-cuda and JCuda, which the cli jar does not hold) and the testkit (the loopback
# transport) next to the cli jar: the cli finds them through the SPI as it finds every plugin, and its child JVM
# inherits the class path.
CUDA_CP="$(grep -E '^lib/(kvtransfer-memory-cuda-[0-9][^/]*|jcuda-[^/]*)\.jar$' "$BUNDLE/classpath.txt" \
    | sed "s#^#$BUNDLE/#" | paste -sd: -)"
LOOPBACK_CP="$(grep -E '^lib/kvtransfer-testkit-[0-9][^/]*\.jar$' "$BUNDLE/classpath.txt" | sed "s#^#$BUNDLE/#" \
    | paste -sd: -)"
KVTRANSFER=("$JAVA" "${JOPTS[@]}" "${CLI_FLAGS[@]}" -Dkvtransfer.jar="$CLI_JAR"
    -cp "$CLI_JAR${CUDA_CP:+:$CUDA_CP}${LOOPBACK_CP:+:$LOOPBACK_CP}" dev.kvtransfer.cli.KvTransferCli)
# The copy rates of step 3, printed next to each device demo's GB/s.
RATES=""
[ -n "${D2D_RATE:-}" ] && RATES=" | copy rates this run: D2D ${D2D_RATE} GB/s, D2H pinned ${D2H_RATE:-?} GB/s"
demo_step() { # NAME SECONDS ARGS...
    local name="$1" secs="$2"; shift 2
    say "$name: kvtransfer $*"
    run_for "$secs" "${KVTRANSFER[@]}" "$@" > "$WORK/demo.out" 2>&1
    local rc=$?
    cat "$WORK/demo.out"
    if [ "$rc" = 0 ] && grep -q '^verify *OK' "$WORK/demo.out"; then
        local gbps
        gbps="$(grep -E '^throughput' "$WORK/demo.out" | sed -E 's/^throughput +([0-9.]+ GB\/s).*/\1/' | head -1)"
        case " $* " in
            *" --pool-memory device "*) say "$name: $gbps$RATES" ;;
        esac
        record "$name" PASS "$gbps$(case " $* " in *" --pool-memory device "*) echo "$RATES" ;; esac)"
    else
        record "$name" FAIL "exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')$(grep -q '^verify *OK' \
            "$WORK/demo.out" || echo ', no "verify OK" line')"
    fi
}
if ! run_for 60 "${KVTRANSFER[@]}" demo --help > "$WORK/demo-help.out" 2>&1; then
    cat "$WORK/demo-help.out"
    record "cli" FAIL "kvtransfer demo --help failed"
else
    record "cli" PASS "kvtransfer demo --help"
    # Host pool (what the cli does today): a baseline on this machine and a check of the runtime image.
    demo_step "demo host pool llama3-8b" 120 demo --model llama3-8b --requests 8 --in-process
    demo_step "demo host pool llama3-8b loopback" 60 demo --model llama3-8b --requests 8 --backend loopback
    # ---- device-pool demos and grid (the cli's --pool-memory option, issue 17) ----
    if grep -q -- '--pool-memory' "$WORK/demo-help.out"; then
        if [ -z "$CUDA_CP" ]; then
            record "device-pool demos" FAIL "the bundle's classpath.txt names no memory-cuda / JCuda jar"
        elif [ -n "$GPU_INFO" ]; then
            demo_step "demo device pool llama3-8b loopback" 90 demo --model llama3-8b --pool-memory device \
                --backend loopback --requests 8
            demo_step "demo device pool llama3-8b aeron 2 proc" 120 demo --model llama3-8b --pool-memory device \
                --requests 8
            demo_step "grid device TP2->TP1" 45 demo --model tiny --pool-memory device --ctx-tp 2 --gen-tp 1 \
                --requests 4 --in-process
            demo_step "grid device PP2->TP2 nhd->hnd" 45 demo --model tiny --pool-memory device --ctx-pp 2 \
                --gen-tp 2 --ctx-pool-layout layer-nhd --gen-pool-layout layer-hnd --requests 4 --in-process
            demo_step "grid device MLA TP2->DP2" 45 demo --model deepseek-v3 --attention mla \
                --pool-memory device --ctx-tp 2 --gen-tp 2 --gen-attention-dp --layers 4 --requests 4 --in-process
        else
            # No GPU: the option must reach the plugin and be refused with its cause (exit 1, one line).
            say "demo device pool without a GPU: kvtransfer demo --pool-memory device (must be refused)"
            run_for 60 "${KVTRANSFER[@]}" demo --model tiny --backend loopback --pool-memory device --requests 1 \
                --warmup 0 > "$WORK/demo.out" 2>&1
            rc=$?
            cat "$WORK/demo.out"
            if [ "$rc" = 1 ] && grep -q 'CUDA is not usable here' "$WORK/demo.out"; then
                record "device-pool refusal" PASS "$(grep -o 'CUDA is not usable here: [^(]*([^)]*)' \
                    "$WORK/demo.out" | head -1)"
            else
                record "device-pool refusal" FAIL "exit $rc, no 'CUDA is not usable here' line"
            fi
            record "device-pool demos" SKIP "no GPU"
        fi
    else
        record "device-pool demos" SKIP "the cli has no --pool-memory option yet (demo --help)"
    fi
fi

summary
if [ -z "$GPU_INFO" ]; then
    say "no GPU: the steps above ran without one (--without-gpu); exit $EXIT_NO_GPU"
    exit "$EXIT_NO_GPU"
fi
[ "$FAILED" = 0 ] && exit 0
exit "$EXIT_FAILED"
