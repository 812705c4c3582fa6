#!/usr/bin/env bash
# The API under load on loopback: enqueue requests/s and p50/p99 with wrk, against a peer
# (Starlette + uvicorn + arq) in the same run; then end-to-end purchases/s with 1, 2 and 4
# worker processes. Usage: bench/api.sh [N]   (BENCH_SECONDS, BENCH_CONNECTIONS)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/api.sh needs wrk (apt-get install wrk)" >&2; exit 1; }
swift build -c release --product entitle >/dev/null
PEER=${API_PEER_VENV:-$HOME/.api-peer-venv}
if ! "$PEER/bin/python" -c 'import arq, starlette, uvicorn, redis, uvloop, httptools' >/dev/null 2>&1; then
  python3 -m venv "$PEER"
  "$PEER/bin/pip" install -q --disable-pip-version-check 'arq==0.26.3' 'starlette==0.46.2' 'uvicorn[standard]==0.34.2' 'redis>=5,<6'
fi
redis-server --port 6393 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-api-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-api-redis.pid)" 2>/dev/null || true' EXIT
"$PEER/bin/python" bench/api.py "${1:-2000}"
