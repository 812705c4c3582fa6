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
    # jobs/s, then the workers' and redis-server's CPU per receipt job (us), the workers' round trips per job
    # and the simulator's CPU per receipt job (us; its own build on each side).
    rate=$(BENCH_WORKER_ARGS="$args" ENTITLE_BIN=$bin VERIFY_PEER_VENV=/nonexistent "$PY" bench/receipts.py "$n" | sed -n 1p | python3 -c '
import json, sys
d = json.load(sys.stdin); row = d["rows"][0]; s = row["split_seconds"]; n = d["n"]
print(row["receipt_jobs_per_s"], round(1e6 * s.get("worker_cpu_s", 0) / n), round(1e6 * s.get("redis_cpu_s", 0) / n),
      round(s.get("entitle_redis_round_trips_total", 0) / n, 1), round(1e6 * s.get("simulator_cpu_s", 0) / n))')
    echo "round $round $side $rate"
  done
done | python3 -c '
import sys
rows = [line.split() for line in sys.stdin]
for r in rows: print(" ".join(r), "(jobs/s, worker us/job, redis us/job, round trips/job, simulator us/job)")
def ratios(column, invert=False):
    before = [float(r[column]) for r in rows if r[2] == "before"]; after = [float(r[column]) for r in rows if r[2] == "after"]
    values = sorted((b / a if invert else a / b) for a, b in zip(after, before) if a and b)
    return ", ".join(f"{x:.3f}" for x in values) + f"; median {values[len(values)//2]:.3f}" if values else "n/a"
print("jobs/s after/before per round:", ratios(3))
print("worker CPU per job, before/after:", ratios(4, invert=True))
print("redis-server CPU per job, before/after:", ratios(5, invert=True))
print("simulator CPU per job, before/after:", ratios(7, invert=True))
'
