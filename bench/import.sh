#!/usr/bin/env bash
# Import N lines (original transaction ids) against the simulator: lines/s queued and
# applied by one worker, Redis bytes per imported customer, and the same run's rate for
# signed-transaction lines. Usage: bench/import.sh [N] (default 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product entitle >/dev/null
redis-server --port 6394 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-import-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-import-redis.pid)" 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p 6394 ping >/dev/null 2>&1 && break; sleep 0.05; done
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/import.py "${1:-100000}"
