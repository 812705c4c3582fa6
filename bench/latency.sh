#!/usr/bin/env bash
# One purchase through the API end to end (POST, worker, GET ?wait=) at fixed offered rates,
# with the long-poll's answer after its job finished and the simulator's latency apart.
# Usage: bench/latency.sh [RATES] [SECONDS]   (default 250,500,1000 and 5 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product entitle >/dev/null
redis-server --port 6394 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-latency-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-latency-redis.pid)" 2>/dev/null || true' EXIT
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/latency.py "$@"
