#!/usr/bin/env bash
# The test command: installs missing native packages (when root), then builds every module and runs every
# test (unit, conformance, cross-process, mpirun) with Maven.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
exec mvn -B -ntp verify "$@"
