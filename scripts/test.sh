#!/usr/bin/env bash
# The README's test command: sets up everything the suite needs on a fresh machine, then runs it all.
#   - the project with its test and cluster extras (pip compiles llama.cpp through llama-cpp-python: ~8 min
#     on 2 cores; Ray Serve for tests/integration/test_cluster.py comes as a wheel)
#   - Prometheus (Debian package), which tests/metrics/test_prometheus.py runs against the live server
# Extra arguments go to pytest. .ci/run calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --progress-bar off -e '.[test,cluster]'
if ! command -v prometheus >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null
fi
python3 -m pytest -q "$@"
