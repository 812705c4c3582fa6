#!/usr/bin/env bash
# Redis bytes per purchase (results kept) and per customer at rest (TTLs passed), by product
# kind, notifications on and off; beside another commit's build when REV is given.
# Usage: bench/memory.sh [N] [REV]   (default N 500; REV built in .build-compare, or BEFORE_BIN; REDIS_ARGS for the server)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500}; rev=${2:-}
before=${BEFORE_BIN:-}
if [ -z "$before" ] && [ -n "$rev" ]; then
  other=$PWD/.build-compare
  if [ ! -d "$other/src" ]; then git worktree add --detach "$other/src" "$rev" >/dev/null; else git -C "$other/src" checkout -q --detach "$rev"; fi
  (cd "$other/src" && swift build -c release --product entitle --scratch-path "$other/build" >/dev/null)
  before=$other/build/release/entitle
fi
swift build -c release --product entitle >/dev/null
# REDIS_ARGS: extra redis-server settings, to measure what a setting saves (see bench/README.md).
redis-server --port 6396 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-memory-redis.pid ${REDIS_ARGS:-} >/dev/null
trap 'kill "$(cat /tmp/bench-memory-redis.pid)" 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p 6396 ping >/dev/null 2>&1 && break; sleep 0.05; done
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/memory.py "$n" "$before"
