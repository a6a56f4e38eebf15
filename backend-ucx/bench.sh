#!/usr/bin/env bash
# Our UCX Connection between two JVMs next to ucx_perftest in the same run (see UcxBench's class comment).
# Usage: backend-ucx/bench.sh [UcxBench options]
# Needs: libucx0 and ucx-utils (ucx_perftest). UCX_* variables pass through to every side; the bench sets
# UCX_LOG_LEVEL=info (unless set) so the transports UCX selects (ep_cfg lines) can be reported.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
cpfile="$(mktemp)"
trap 'rm -f "$cpfile"' EXIT
# Builds through the reactor into target/ only (no install); the bench lives in test scope.
mvn -q -B -ntp -pl backend-ucx -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$cpfile" >/dev/null
export UCX_LOG_LEVEL="${UCX_LOG_LEVEL:-info}"
exec java -Xmx1g -cp "$here/target/test-classes:$here/target/classes:$(cat "$cpfile")" dev.kvtransfer.ucx.UcxBench "$@"
