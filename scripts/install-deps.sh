#!/usr/bin/env bash
# Installs the Debian packages kvtransfer's native backends need, when they are missing:
#   libucx0 + ucx-utils   (UCX transport through jucx 1.12.1; ucx_perftest for the baseline)
#   openmpi-bin + libopenmpi-dev (MPI transport: mpirun, mpicc, libmpi)
#   etcd-server           (the registry's etcd implementation; its tests start their own /usr/bin/etcd on free
#                          loopback ports, the packaged service is not used)
# As root it installs them with apt-get; otherwise it says what is missing and how to install it.
# The JDK (17) and Maven are assumed present.
set -euo pipefail

REQUIRED=(libucx0 ucx-utils openmpi-bin libopenmpi-dev etcd-server)
missing=()
for p in "${REQUIRED[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all native packages present (${REQUIRED[*]})"
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
    echo "install-deps: installed ${missing[*]}"
else
    echo "install-deps: MISSING packages: ${missing[*]}" >&2
    echo "install-deps: run as root: apt-get install ${missing[*]}" >&2
    echo "install-deps: continuing; tests of the UCX/MPI backends will report the missing libraries, the etcd" \
        "registry tests are skipped with the reason" >&2
fi
