#!/usr/bin/env bash
# What the public surface's checks cost: `entitle api` built from BASE (default 51ea7bd, the
# commit before them) and from this tree, enqueue load from wrk against each, alternately,
# in one run; requests/s, p99 and the ratio. Usage: bench/api_checks.sh [BASE]
# (BENCH_SECONDS per round, 10; BENCH_ROUNDS, 3; BENCH_CONNECTIONS, 32; BENCH_IDLE_CONNECTIONS, 0)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/api_checks.sh needs wrk (apt-get install wrk)" >&2; exit 1; }
base=${1:-51ea7bd}
swift build -c release --product entitle >/dev/null
before=.build-bench-base
if [ ! -x "$before/checkout/.build/release/entitle" ] || [ "$(cat "$before/ref" 2>/dev/null)" != "$base" ]; then
  rm -rf "$before" && mkdir -p "$before"
  git worktree add --detach "$before/checkout" "$base" >/dev/null 2>&1 || git -C "$before/checkout" checkout --detach "$base"
  (cd "$before/checkout" && swift build -c release --product entitle >/dev/null)
  echo "$base" > "$before/ref"
fi
python3 -c 'import redis' 2>/dev/null || pip install -q redis
redis-server --port 6394 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-checks-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-checks-redis.pid)" 2>/dev/null || true' EXIT
python3 bench/api_checks.py "$before/checkout/.build/release/entitle" .build/release/entitle "$base"
