#!/usr/bin/env bash
# The queue at its limit (issue 31), Entitle beside Sidekiq in one run: bulk enqueue, Redis memory
# per pending job and Redis CPU per job lifecycle (bench/queue_limits.py, a private redis-server),
# then no-op jobs/s with one and two worker processes, 10 ms jobs on 50 slots and idle pickup
# latency (the shared peers harness and bench/pickup_latency.py, through bench/run.sh).
# Usage: bench/queue.sh [N] [M] [ROUNDS]   (defaults 100000 20000 3; needs ruby-sidekiq, redis-server,
# and ~/.peers-venv with redis-py and dramatiq: see bench/README.md, "Rerun")
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product entitle >&2
PY=${BENCH_VENV:-$HOME/.peers-venv}/bin/python
"$PY" bench/queue_limits.py "${1:-100000}" "${2:-20000}" "${3:-3}"
ONLY="sidekiq entitle" bench/run.sh
