#!/usr/bin/env bash
# Push to HOLDERS devices among CUSTOMERS customers through the API, a worker and the local
# APNs; Redis bytes per device; the audience lookup; beside Python httpx over HTTP/2 to the
# same local APNs. Usage: bench/push.sh [CUSTOMERS] [HOLDERS] (default 1000000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product entitle >/dev/null
swift build -c release --product push-bench >/dev/null
redis-server --port 6395 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-push-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-push-redis.pid)" 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p 6395 ping >/dev/null 2>&1 && break; sleep 0.05; done
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/push.py "${1:-1000000}" "${2:-100000}"
