#!/usr/bin/env bash
# Fuzzes every Jazzer target of the fuzz module (coverage-guided, libFuzzer under Jazzer), one JVM per target,
# and writes a report: fuzz/target/fuzz-report/REPORT.md (the table) and results.tsv (the raw numbers), with each
# target's log in its own directory. Jazzer writes a crashing input into the target's seed directory under
# fuzz/src/test/resources (crash-<sha1>): after the fix it stays there as a regression seed.
#
#   scripts/fuzz.sh [seconds-per-target] [name-filter]
#
# Default 60 s per target. A finding makes the script exit 1 after every target ran.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_PER_TARGET="${1:-60}"
FILTER="${2:-}"
OUT="$PWD/fuzz/target/fuzz-report"
mkdir -p "$OUT"
MVN=(mvn -B -ntp -o -q -Djapicmp.skip=true)

# The decoders' modules are built in the same reactor, so that a fix in one is fuzzed without installing it.
MODULES=api,core,backend-ucx,backend-aeron,registry,cli,fuzz
"${MVN[@]}" -pl "$MODULES" test-compile dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$OUT/classpath.txt"
CP="$PWD/fuzz/target/test-classes:$(cat "$OUT/classpath.txt")"

# Every @FuzzTest method: Class#method.
mapfile -t TARGETS < <(grep -rl '@FuzzTest' fuzz/src/test/java | sort | while read -r f; do
  cls=$(echo "${f#fuzz/src/test/java/}" | sed 's/\.java$//; s#/#.#g')
  grep -A1 '@FuzzTest' "$f" | grep -oE 'void [a-zA-Z0-9_]+' | awk -v c="$cls" '{print c "#" $2}'
done | grep -e "$FILTER")

FLAGS="${KVTRANSFER_JVM_FLAGS:---add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED -Dchronicle.analytics.disable=true}"
printf 'target\tseconds\texecutions\texec_per_s\tcov\tft\tcorpus\tfindings\n' > "$OUT/results.tsv"
failed=0
for t in "${TARGETS[@]}"; do
  name="${t##*.}"; name="${name/\#/.}"
  dir="$OUT/$name"; rm -rf "$dir"; mkdir -p "$dir"
  echo "fuzzing $t for ${SECONDS_PER_TARGET}s"
  set +e
  # The generated corpus goes to the target's own directory (the working directory), findings into its seeds.
  # The targets connect only to ports they opened on loopback: Jazzer's SSRF detector is off.
  (cd "$dir" && JAZZER_FUZZ=1 timeout $((SECONDS_PER_TARGET + 180)) java $FLAGS -XX:+UseParallelGC -Xmx2g \
      -Djazzer.disabled_hooks=com.code_intelligence.jazzer.sanitizers.ServerSideRequestForgery \
      -Djazzer.instrumentation_includes='dev.kvtransfer.**:com.fasterxml.**' \
      -Djazzer.internal.basedir="$ROOT/fuzz" \
      -cp "$CP" \
      dev.kvtransfer.fuzz.FuzzMain "$t" "$SECONDS_PER_TARGET") > "$dir/log.txt" 2>&1
  rc=$?
  set -e
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$dir/log.txt" | tail -1 || true)
  last=$(grep -E '^#[0-9]+[[:space:]]' "$dir/log.txt" | grep 'cov:' | tail -1 || true)
  line="${done_line:-$last}"
  execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$line"); execs="${execs:-0}"
  runs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$dir/log.txt" | tail -1 || true)
  [ -n "$runs" ] && execs=$(awk '{print $2}' <<<"$runs")
  eps=$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$line"); eps="${eps:-0}"
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$line"); cov="${cov:-0}"
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$line"); ft="${ft:-0}"
  corp=$(sed -nE 's/.*corp: ([0-9]+\/[0-9A-Za-z]+).*/\1/p' <<<"$line"); corp="${corp:-0}"
  findings=$(grep -oE 'found=[0-9]+' "$dir/log.txt" | tail -1 | cut -d= -f2 || true)
  findings="${findings:-?}"
  [ "$rc" -ne 0 ] && [ "$findings" = "0" ] && findings="rc=$rc"
  [ "$findings" != "0" ] && failed=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$SECONDS_PER_TARGET" "$execs" "$eps" "$cov" "$ft" "$corp" \
      "$findings" >> "$OUT/results.tsv"
  echo "  executions=$execs cov=$cov ft=$ft findings=$findings"
done

{
  echo "# Fuzzing report"
  echo
  echo "Jazzer (libFuzzer) in fuzzing mode, ${SECONDS_PER_TARGET} s per target, one JVM each."
  echo "executions = inputs tried; cov / ft = libFuzzer's coverage counters and features at the end;"
  echo "findings = inputs that broke the target's contract (left in the target's directory)."
  echo
  echo "| target | executions | exec/s | cov | ft | corpus | findings |"
  echo "| --- | ---: | ---: | ---: | ---: | --- | ---: |"
  tail -n +2 "$OUT/results.tsv" | awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $3, $4, $5, $6, $7, $8}'
  total=$(tail -n +2 "$OUT/results.tsv" | awk -F'\t' '{s+=$3} END {print s+0}')
  echo
  echo "Total executions: $total."
} > "$OUT/REPORT.md"
cat "$OUT/REPORT.md"
exit $failed
