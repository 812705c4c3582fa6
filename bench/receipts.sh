#!/usr/bin/env bash
# End-to-end receipt jobs per second for 1 and 2 worker processes, with the time split and
# the same run's no-op rate and Apple's Python verifier for ratios. Usage: bench/receipts.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product entitle >/dev/null
redis-server --port 6392 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-receipts-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-receipts-redis.pid)" 2>/dev/null || true' EXIT
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/receipts.py "${1:-2000}"
