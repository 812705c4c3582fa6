#!/usr/bin/env bash
# Receipt jobs/s of this tree against another commit's build, taking turns in one session
# (the machine is shared and noisy: compare the ratio of each pair, not the absolute rates).
# Usage: bench/receipts_compare.sh REV [ROUNDS] [N]   (one worker process; BENCH_PROCESSES to change)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1; rounds=${2:-4}; n=${3:-2000}
# BEFORE_BIN: a release `entitle` of REV built already; otherwise it is built in .build-compare.
before=${BEFORE_BIN:-}
if [ -z "$before" ]; then
  other=$PWD/.build-compare
  if [ ! -d "$other/src" ]; then git worktree add --detach "$other/src" "$rev" >/dev/null; else git -C "$other/src" checkout -q --detach "$rev"; fi
  (cd "$other/src" && swift build -c release --product entitle --scratch-path "$other/build" >/dev/null)
  before=$other/build/release/entitle
fi
swift build -c release --product entitle >/dev/null
redis-server --port 6392 --save '' --appendonly no --daemonize yes --pidfile /tmp/bench-receipts-redis.pid >/dev/null
trap 'kill "$(cat /tmp/bench-receipts-redis.pid)" 2>/dev/null || true' EXIT
PY=${PEERS_VENV:-$HOME/.peers-venv}/bin/python
export BENCH_PROCESSES=${BENCH_PROCESSES:-1}
for round in $(seq "$rounds"); do
  for side in before after; do
    bin=.build/release/entitle; args=${AFTER_WORKER_ARGS:-}; [ "$side" = before ] && bin=$before && args=""
    rate=$(BENCH_WORKER_ARGS="$args" ENTITLE_BIN=$bin VERIFY_PEER_VENV=/nonexistent "$PY" bench/receipts.py "$n" | head -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["receipt_jobs_per_s"])')
    echo "round $round $side $rate"
  done
done | python3 -c '
import sys
rows = [line.split() for line in sys.stdin]
for r in rows: print(" ".join(r))
before = [float(r[3]) for r in rows if r[2] == "before"]; after = [float(r[3]) for r in rows if r[2] == "after"]
ratios = sorted(a / b for a, b in zip(after, before))
print("after/before per round:", ", ".join(f"{x:.3f}" for x in ratios), "median", f"{ratios[len(ratios)//2]:.3f}")
'
