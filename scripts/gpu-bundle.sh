#!/usr/bin/env bash
# Builds, on a build machine (JDK 17 + Maven), everything scripts/gpu-check.sh needs on a GPU machine that has no
# JDK and no network, into one ignored directory (default target/gpu-bundle/):
#
#   runtime.tar.gz   a jlink-ed Java runtime (modules found with jdeps), libjvm stripped, gzip'ed for travel
#   lib/             the memory-cuda test class path that the cli jar does not already hold: memory-cuda's jar and
#                    test jar, JCuda (its natives jar without the 24 MB PTX-compiler library nothing here loads),
#                    the JUnit Platform console launcher
#   cli/             the cli's runnable jar (also the rest of the test class path: api, core, testkit, assertj, ...)
#   classpath.txt    the test class path, relative to the bundle
#   MANIFEST.txt     what went in: commit, modules, sizes
#
# Usage: scripts/gpu-bundle.sh [--no-build] [--check] [--out DIR] [-- MAVEN_ARGS...]
#   --no-build  use the artifacts already built (cli/target, memory-cuda/target); default: mvn install -DskipTests
#   --check     afterwards, unpack the runtime and run java -version, the memory-cuda tests through the console
#               launcher (GPU tests are reported skipped here), a host-pool `kvtransfer demo --model tiny` and
#               `demo --pool-memory device` with the bundle's cuda plugin on the cli's class path (as gpu-check.sh
#               runs it): refused with the plugin's cause where there is no GPU, verified where there is one
#   MAVEN_ARGS  e.g. -o for an offline build
set -euo pipefail
export LC_ALL=C # sort and comm must agree on the order
cd "$(dirname "$0")/.."
ROOT="$PWD"

OUT="$ROOT/target/gpu-bundle"
BUILD=1
CHECK=0
MVN_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) BUILD=0 ;;
        --check) CHECK=1 ;;
        --out) OUT="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
        --) shift; MVN_ARGS=("$@"); break ;;
        *) echo "gpu-bundle: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
    shift
done

say() { echo "gpu-bundle: $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { say "needs $1 (a JDK 17 with jmods, and Maven)"; exit 2; }; }
for tool in java jar jdeps jlink mvn tar gzip; do need "$tool"; done

JAVA_HOME_DIR="$(dirname "$(dirname "$(readlink -f "$(command -v jlink)")")")"
JAVA_SPEC="$("$JAVA_HOME_DIR/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')"
[ "$JAVA_SPEC" = "17" ] || { say "jlink is from Java $JAVA_SPEC; the project targets 17 (set PATH to a JDK 17)"; exit 2; }
[ -d "$JAVA_HOME_DIR/jmods" ] || { say "$JAVA_HOME_DIR has no jmods/ (install the full JDK, e.g. openjdk-17-jdk)"; exit 2; }

CLI_JAR="$ROOT/cli/target/kvtransfer-cli-0.1.0-SNAPSHOT-all.jar"
MC_JAR="$ROOT/memory-cuda/target/kvtransfer-memory-cuda-0.1.0-SNAPSHOT.jar"
MC_TESTS="$ROOT/memory-cuda/target/test-classes"

if [ "$BUILD" = 1 ]; then
    say "building (mvn install -DskipTests -DskipITs ${MVN_ARGS[*]:-}) ..."
    mvn -q -B -ntp -DskipTests -DskipITs "${MVN_ARGS[@]}" install
fi
for f in "$CLI_JAR" "$MC_JAR" "$MC_TESTS"; do
    [ -e "$f" ] || { say "missing $f (run without --no-build)"; exit 2; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# ---- the test class path, as Maven resolves it ----
mvn -q -B -ntp "${MVN_ARGS[@]}" -pl memory-cuda dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$WORK/test.cp" >/dev/null
tr ':' '\n' < "$WORK/test.cp" | grep -v '^$' > "$WORK/test.jars"
PLATFORM_VERSION="$(sed -n 's#.*/junit-platform-engine-\([0-9][^/]*\)\.jar$#\1#p' "$WORK/test.jars" | head -1)"
[ -n "$PLATFORM_VERSION" ] || { say "no junit-platform-engine on the test class path"; exit 2; }
if ! mvn -q -B -ntp "${MVN_ARGS[@]}" dependency:copy \
    -Dartifact="org.junit.platform:junit-platform-console-standalone:$PLATFORM_VERSION" \
    -DoutputDirectory="$WORK/console" > "$WORK/console.log" 2>&1; then
    say "could not fetch junit-platform-console-standalone:$PLATFORM_VERSION (offline with -o and not in the local"\
" repository? run once without -o):"
    grep -E 'ERROR' "$WORK/console.log" | head -5 >&2
    exit 2
fi
CONSOLE_JAR="$WORK/console/junit-platform-console-standalone-$PLATFORM_VERSION.jar"

entries() { jar tf "$1" | grep '\.class$' | grep -v 'module-info\.class$' | sort -u || true; }
# new_classes JAR: does JAR hold a class that the cli jar and the console launcher do not? (No grep -q here:
# with pipefail, its early exit would fail the pipeline.)
new_classes() { [ -n "$(comm -23 <(entries "$1") "$WORK/provided.entries")" ]; }

rm -rf "$OUT"
mkdir -p "$OUT/lib" "$OUT/cli"
# The cli jar without the etcd client stack (jetcd, gRPC, Vert.x, Netty, protobuf and Google's common protos: about
# 12 MB packed). Only the etcd registry loads them, and the GPU check never starts a cluster registry; without the
# cut the bundle passes the 64 MiB a device run may carry. --check below runs the tests and demos on the slim jar.
SLIM_RE='^(io/etcd|io/grpc|io/vertx|io/netty|io/perfmark|dev/failsafe|com/google/(protobuf|api|rpc|type|longrunning|cloud|geo|logging|apps)|google/|grpc/|META-INF/native-image/io\.netty|META-INF/native/[^/]*netty)'
mkdir -p "$WORK/slim" && (cd "$WORK/slim" && jar xf "$CLI_JAR")
(cd "$WORK/slim" && find . -type f | sed 's#^\./##' | { grep -E "$SLIM_RE" || true; } | xargs -r rm -f)
mv "$WORK/slim/META-INF/MANIFEST.MF" "$WORK/slim.mf"
# A dependency's stray module-info (class version 65) would stop jar(1); the class path never reads it.
find "$WORK/slim" -name module-info.class -delete
find "$WORK/slim" -type d -empty -delete
jar --create --file "$OUT/cli/$(basename "$CLI_JAR")" --manifest "$WORK/slim.mf" -C "$WORK/slim" .
rm -rf "$WORK/slim"
cp "$CONSOLE_JAR" "$OUT/lib/"
sort -u <(entries "$CLI_JAR") <(entries "$CONSOLE_JAR") > "$WORK/provided.entries"

# Left out on purpose: byte-buddy (9 MB), which AssertJ loads only for soft assertions and assumptions; these
# tests use neither, and the bundle check below runs them from the bundle to prove it.
EXCLUDE_RE='^byte-buddy-'
CP=("lib/$(basename "$CONSOLE_JAR")")
for j in $(cat "$WORK/test.jars"); do
    name="$(basename "$j")"
    if [[ "$name" =~ $EXCLUDE_RE ]] || [ ! -f "$j" ]; then
        continue
    fi
    case "$name" in
        jcuda-natives-*.jar)
            # Keep the runtime, driver and NVRTC bindings; drop libJNvPTXCompiler (24 MB, never loaded here).
            mkdir -p "$WORK/natives" && (cd "$WORK/natives" && jar xf "$j")
            rm -f "$WORK"/natives/lib/libJNvPTXCompiler-*
            jar --create --file "$OUT/lib/$name" -C "$WORK/natives" .
            CP+=("lib/$name") ;;
        *)
            # In unless the cli jar or the launcher already holds every class of it (same versions: one reactor,
            # one JUnit BOM).
            if new_classes "$j"; then
                cp "$j" "$OUT/lib/"
                CP+=("lib/$name")
            fi ;;
    esac
done
# memory-cuda itself (not on its own dependency class path): its tests, and its jar until the cli jar holds it.
jar --create --file "$OUT/lib/kvtransfer-memory-cuda-tests.jar" -C "$MC_TESTS" .
CP+=("lib/kvtransfer-memory-cuda-tests.jar")
if new_classes "$MC_JAR"; then
    cp "$MC_JAR" "$OUT/lib/"
    CP+=("lib/$(basename "$MC_JAR")")
fi
CP+=("cli/$(basename "$CLI_JAR")")
printf '%s\n' "${CP[@]}" > "$OUT/classpath.txt"

# ---- the Java modules they use (jdeps; the fat jar's stray module-info would make jdeps read it as a module) ----
mkdir -p "$WORK/cli-classes"
(cd "$WORK/cli-classes" && jar xf "$CLI_JAR")
find "$WORK/cli-classes" -name module-info.class -delete
rm -rf "$WORK/cli-classes/META-INF/versions"
MODS="$(jdeps --ignore-missing-deps --print-module-deps --multi-release 17 -q \
    "$WORK/cli-classes" "$OUT"/lib/*.jar 2>/dev/null | tail -1)"
# Always: jdk.unsupported (Unsafe), management (JMX, micrometer's JVM metrics), logging (JCuda) and jdk.zipfs
# (JUnit's class-path scanner walks jars as zip file systems; jdeps cannot see a service provider). java.desktop
# is dropped: only JNA's AWT helpers and bean/logging binders that these runs never call use it (the check below
# runs the tests and the cli without it), and it is 10 MB.
MODS="$(printf '%s\n' ${MODS//,/ } java.base java.logging java.management jdk.management jdk.unsupported jdk.zipfs \
    | grep -v '^java.desktop$' | sort -u | paste -sd, -)"
say "modules: $MODS"
jlink --add-modules "$MODS" --strip-debug --no-header-files --no-man-pages --compress=2 \
    --output "$WORK/runtime"
if command -v strip >/dev/null 2>&1; then
    # Debian's libjvm.so keeps its symbol table (4 MB); the JVM needs only the dynamic symbols.
    strip --strip-unneeded "$WORK/runtime/lib/server/libjvm.so"
fi
RUNTIME_BYTES="$(du -sb "$WORK/runtime" | cut -f1)"
tar -C "$WORK" -cf - runtime | gzip -9 > "$OUT/runtime.tar.gz"

{
    echo "kvtransfer GPU bundle"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "jdk: $("$JAVA_HOME_DIR/bin/java" -version 2>&1 | head -1)"
    echo "modules: $MODS"
    echo "runtime unpacked: $RUNTIME_BYTES bytes"
    echo "files:"
    (cd "$OUT" && find . -type f ! -name MANIFEST.txt -printf '  %s\t%p\n' | sort -k2)
} > "$OUT/MANIFEST.txt"
TOTAL="$(du -sb "$OUT" | cut -f1)"
echo "total: $TOTAL bytes" >> "$OUT/MANIFEST.txt"
say "bundle: $OUT, $TOTAL bytes ($((TOTAL / 1048576)) MiB; runtime unpacked $((RUNTIME_BYTES / 1048576)) MiB)"
if [ "$TOTAL" -ge $((60 * 1048576)) ]; then
    say "bundle is $TOTAL bytes: too close to the 64 MiB a device run may carry"
    exit 1
fi

if [ "$CHECK" = 1 ]; then
    say "check: unpacking the runtime and running it"
    tar -C "$WORK" -xzf "$OUT/runtime.tar.gz" --transform 's#^runtime#check-runtime#'
    JAVA="$WORK/check-runtime/bin/java"
    "$JAVA" -version
    CPATH="$(sed "s#^#$OUT/#" "$OUT/classpath.txt" | paste -sd: -)"
    set +e
    "$JAVA" -Djava.io.tmpdir="$WORK" -jar "$OUT/lib/junit-platform-console-standalone-$PLATFORM_VERSION.jar" \
        execute --disable-banner --disable-ansi-colors --details=tree --details-theme=ascii --fail-if-no-tests \
        --class-path "$CPATH" --select-package dev.kvtransfer.memory.cuda > "$WORK/tests.out" 2>&1
    rc=$?
    set -e
    # Test classes (with skip reasons) and the summary; the lines of single tests only when something failed.
    if [ "$rc" = 0 ]; then grep -vE '^\|[ |] [+'"'"']--' "$WORK/tests.out"; else cat "$WORK/tests.out"; fi
    [ "$rc" = 0 ] || { say "check: the test launcher failed (exit $rc)"; exit 1; }
    grep -q "tests skipped" "$WORK/tests.out" || { say "check: no skipped line in the launcher output"; exit 1; }
    # The cli on the same runtime: Chronicle, Aeron and Guice need nothing that jdeps missed. With the cuda plugin
    # (memory-cuda and JCuda from lib/) on its class path, as gpu-check.sh runs it.
    CUDA_CP="$(grep -E '^lib/(kvtransfer-memory-cuda-[0-9][^/]*|jcuda-[^/]*)\.jar$' "$OUT/classpath.txt" \
        | sed "s#^#$OUT/#" | paste -sd: -)"
    [ -n "$CUDA_CP" ] || { say "check: classpath.txt names no memory-cuda / JCuda jar"; exit 1; }
    KVT=("$JAVA" -Djava.io.tmpdir="$WORK" --add-opens=java.base/java.lang=ALL-UNNAMED
        --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
        --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
        --add-opens=java.base/java.io=ALL-UNNAMED --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED
        --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED
        --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED -Dchronicle.analytics.disable=true
        -cp "$OUT/cli/$(basename "$CLI_JAR"):$CUDA_CP" dev.kvtransfer.cli.KvTransferCli)
    "${KVT[@]}" demo --model tiny --requests 2 --warmup 1 --in-process \
        > "$WORK/demo.out" 2>&1 || { cat "$WORK/demo.out"; say "check: the cli demo failed"; exit 1; }
    grep -q '^verify *OK' "$WORK/demo.out" || { cat "$WORK/demo.out"; say "check: no verify OK"; exit 1; }
    set +e
    "${KVT[@]}" demo --model tiny --requests 2 --warmup 1 --in-process --pool-memory device > "$WORK/device.out" 2>&1
    rc=$?
    set -e
    if [ "$rc" = 0 ] && grep -q '^verify *OK' "$WORK/device.out"; then
        DEVICE_LINE="device pool: $(grep '^verify' "$WORK/device.out" | tr -s ' ')"
    elif [ "$rc" = 1 ] && grep -q 'CUDA is not usable here' "$WORK/device.out"; then
        DEVICE_LINE="--pool-memory device refused: $(grep -o 'CUDA is not usable here: [^(]*([^)]*)' \
            "$WORK/device.out" | head -1)"
    else
        cat "$WORK/device.out"; say "check: demo --pool-memory device neither verified nor was refused (exit $rc)"
        exit 1
    fi
    say "check: OK: java -version; $(grep -o '[0-9]* tests successful' "$WORK/tests.out"),"\
" $(grep -o '[0-9]* tests skipped' "$WORK/tests.out") (GPU tests, reason above); kvtransfer demo --model tiny:"\
" $(grep '^verify' "$WORK/demo.out" | tr -s ' '); $DEVICE_LINE"
fi
