#!/usr/bin/env bash
# All engine benchmarks in one run, side by side with the peers on one Redis (see bench/README.md).
# env: BENCH_VENV (a venv with redis-py and dramatiq; default ~/.peers-venv), ONLY (peers; default "sidekiq dramatiq entitle").
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS="$(cd ../shared/bench/peers && pwd)"
export BENCH_VENV="${BENCH_VENV:-$HOME/.peers-venv}"
export BENCH_RESULTS="${BENCH_RESULTS:-$PWD/bench/results}"
swift build -c release --product entitle >&2
BENCH_PEERS_PATH="$PWD/bench/peers" ONLY="${ONLY:-sidekiq dramatiq entitle}" \
  EXTRA_RUNS="entitle:noop entitle:noop-1proc entitle:sleep10" bash "$PEERS/run_all.sh"
"$BENCH_VENV/bin/python" bench/pickup_latency.py 2000
