#!/usr/bin/env bash
# Entitle on one redis-server vs a 3-primary Redis Cluster, side by side (see bench/README.md):
# 1. no-op jobs/s with 3 queues (on the cluster, one per primary), 1 and 2 worker processes,
#    the four setups taking turns in each round;
# 2. the client's cost of cluster routing per command (cluster-bench: the same commands against
#    one redis-server and against a one-node cluster serving every slot, A B A B).
# env: ROUNDS (3), JOBS (per queue, 20000), CONCURRENCY (per queue and process, 32)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-20000}
CONCURRENCY=${CONCURRENCY:-32}
swift build -c release --product entitle >&2
swift build -c release --product cluster-bench >&2
BIN=$PWD/.build/release/entitle

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_redis NAME PORT [redis-server options...]
start_redis() {
  local dir=$work/$1 port=$2
  shift 2
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no --maxmemory-policy noeviction \
    --daemonize no --logfile "$dir/log" "$@" &
  pids+=($!)
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $port did not start" >&2
  exit 1
}

single=$(free_port)
start_redis single "$single"
cluster=()
for i in 1 2 3; do
  port=$(free_port)
  start_redis "primary-$i" "$port" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$(free_port)"
  cluster+=("$port")
done
redis-cli --cluster create "127.0.0.1:${cluster[0]}" "127.0.0.1:${cluster[1]}" "127.0.0.1:${cluster[2]}" --cluster-yes >/dev/null
one=$(free_port)
start_redis one-node "$one" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$(free_port)"
redis-cli -p "$one" cluster addslotsrange 0 16383 >/dev/null
for port in "${cluster[@]}" "$one"; do
  for _ in $(seq 200); do redis-cli -p "$port" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
done

# Three queues whose slots are on the three primaries (redis-cli gives each a third of the slots).
queues=()
declare -A taken=()
for n in $(seq 0 200); do
  third=$(( $(redis-cli -p "${cluster[0]}" cluster keyslot "{q$n}") / 5462 ))
  if [ -z "${taken[$third]:-}" ]; then taken[$third]=1; queues+=("q$n"); fi
  [ ${#queues[@]} -eq 3 ] && break
done
spec=$(printf "%s=$CONCURRENCY," "${queues[@]}")
spec=${spec%,}
single_url="redis://127.0.0.1:$single"
cluster_url="redis+cluster://127.0.0.1:${cluster[0]},127.0.0.1:${cluster[1]},127.0.0.1:${cluster[2]}"

# run_jobs URL POLL_PORT PROCESSES: enqueue JOBS no-op jobs per queue, start the workers, and
# print jobs/s from the first job done to the last.
run_jobs() {
  local url=$1 poll=$2 processes=$3 prefix=bench$RANDOM$RANDOM total=$((JOBS * 3))
  for q in "${queues[@]}"; do "$BIN" enqueue noop --count "$JOBS" --queue "$q" --quiet --redis "$url" --prefix "$prefix" 2>/dev/null; done
  local workers=()
  for _ in $(seq "$processes"); do
    "$BIN" worker --redis "$url" --prefix "$prefix" --queues "$spec" --connections 8 --log-level error &
    workers+=($!)
  done
  local first="" done=0
  while [ "$done" -lt "$total" ]; do
    done=0
    for q in "${queues[@]}"; do
      n=$(redis-cli -c -p "$poll" hget "$prefix:{$q}:stats" succeeded:noop)
      done=$((done + ${n:-0}))
    done
    if [ -z "$first" ] && [ "$done" -gt 0 ]; then first=$(date +%s.%N); first_done=$done; fi
    sleep 0.02
  done
  local last
  last=$(date +%s.%N)
  kill -TERM "${workers[@]}"
  wait "${workers[@]}" 2>/dev/null || true
  for port in "$single" "${cluster[@]}"; do redis-cli -p "$port" flushall >/dev/null; done
  python3 -c "print(round(($total - $first_done) / ($last - $first)))"
}

echo "queues: ${queues[*]} (concurrency $CONCURRENCY each per process), $JOBS no-op jobs per queue"
echo
echo "| round | one server, 1 process | cluster, 1 process | ratio | one server, 2 processes | cluster, 2 processes | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  s1=$(run_jobs "$single_url" "$single" 1)
  c1=$(run_jobs "$cluster_url" "${cluster[0]}" 1)
  s2=$(run_jobs "$single_url" "$single" 2)
  c2=$(run_jobs "$cluster_url" "${cluster[0]}" 2)
  python3 -c "print(f'| $round | {$s1:,} | {$c1:,} | {$c1/$s1:.2f} | {$s2:,} | {$c2:,} | {$c2/$s2:.2f} |')"
done
echo
echo "Cluster routing per command (A: one redis-server; B, C: a one-node cluster serving all slots, B without routing, C routed), $ROUNDS rounds of 20,000 commands"
echo
.build/release/cluster-bench "$single_url" "redis://127.0.0.1:$one" "$ROUNDS" 20000
