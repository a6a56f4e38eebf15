#!/usr/bin/env bash
# Bandwidth of the UCX Connection between two JVMs next to ucx_perftest -t tag_bw, same sizes, one run.
# Usage: backend-ucx/bench.sh [--sizes 1m,16m,64m] [--bytes 1g] [--warmup 3] [--registration rcache|explicit]
#        [--no-perftest] [--perftest /path/to/ucx_perftest]
# Needs: libucx0 and ucx-utils (ucx_perftest). UCX_TLS and other UCX_* variables pass through to both sides.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
mvn -q -B -ntp -pl backend-ucx -am install -DskipTests -DskipITs
cpfile="$(mktemp)"
trap 'rm -f "$cpfile"' EXIT
mvn -q -B -ntp -pl backend-ucx dependency:build-classpath -Dmdep.includeScope=runtime -Dmdep.outputFile="$cpfile" >/dev/null
exec java -cp "$here/target/classes:$(cat "$cpfile")" dev.kvtransfer.ucx.UcxBench "$@"
