#!/usr/bin/env bash
# A year's report for a publisher with 100,000 subscribers (from the folded figures), and the
# Redis bytes of the event log and the figures. Usage: bench/reports.sh [SUBSCRIBERS]
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product report-bench >/dev/null
dir=$(mktemp -d)
redis-server --port 6393 --save '' --appendonly no --daemonize yes --dir "$dir" --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p 6393 ping >/dev/null 2>&1 && break; sleep 0.05; done
.build/release/report-bench redis://127.0.0.1:6393 "${1:-100000}"
