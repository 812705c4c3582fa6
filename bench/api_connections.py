"""The API's Redis pool size under enqueue load: two `entitle api` processes of this tree,
one with `--connections A` and one with `--connections B` (default 16 and 4), on one private
redis-server, loaded in turns by wrk POSTing /v1/purchases (a new transaction id each time,
BENCH_CONNECTIONS HTTP connections) for BENCH_SECONDS each, ROUNDS rounds; requests/s, p50
and p99 per turn, and B's requests/s over A's per round with the median.

Usage: bench/api_connections.py [A] [B] [ROUNDS]   (needs wrk, redis-server and redis-py)
"""
import os
import statistics
import subprocess
import sys

import simulator_purchases
from private_redis import free_port, private_redis
from wrk_load import wait_http, wrk_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN', os.path.join(ROOT, '.build', 'release', 'entitle'))
TOKEN = 'bench-token-0123456789'
SECONDS = int(os.environ.get('BENCH_SECONDS', '10'))
CONNECTIONS = int(os.environ.get('BENCH_CONNECTIONS', '32'))
A = int(sys.argv[1]) if len(sys.argv) > 1 else 16
B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 4


def main():
    catalog = simulator_purchases.unlimited_catalog(ROOT)
    with private_redis('bench-api-connections-') as (_, port):
        sim = subprocess.Popen([BIN, 'simulator', '--port', '0', '--log-level', 'error'], stdout=subprocess.PIPE, text=True)
        simulator = next(line.split()[-1] for line in sim.stdout if 'listening on' in line)
        env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator, ENTITLE_CATALOG=catalog,
                   ENTITLE_LOG_LEVEL='error', **simulator_purchases.development_secrets(TOKEN))
        apis = {}
        try:
            for size in (A, B):
                api_port = free_port()
                apis[size] = (api_port, subprocess.Popen(
                    [BIN, 'api', '--port', str(api_port), '--redis', f'redis://127.0.0.1:{port}', '--prefix', 'bench',
                     '--connections', str(size)], env=env, stdout=subprocess.DEVNULL))
                wait_http(f'http://127.0.0.1:{api_port}/readyz')
            for size in (A, B):
                wrk_purchases(f'http://127.0.0.1:{apis[size][0]}/v1/purchases', 3, CONNECTIONS, TOKEN)  # warm up
            rows = {A: [], B: []}
            for round in range(1, ROUNDS + 1):
                for size in ((A, B) if round % 2 else (B, A)):
                    result = wrk_purchases(f'http://127.0.0.1:{apis[size][0]}/v1/purchases', SECONDS, CONNECTIONS, TOKEN)
                    rows[size].append(result)
                    print(f'round {round} --connections {size}: {result["per_s"]:,.0f} requests/s, '
                          f'p50 {result.get("p50_ms", 0):.2f} ms, p99 {result.get("p99_ms", 0):.2f} ms', flush=True)
            ratios = sorted(b['per_s'] / a['per_s'] for a, b in zip(rows[A], rows[B]))
            print(f'requests/s with {B} over {A} connections per round: ' + ', '.join(f'{x:.3f}' for x in ratios)
                  + f'; median {statistics.median(ratios):.3f}')
        finally:
            for _, process in apis.values():
                process.terminate()
                process.wait()
            sim.terminate()
            sim.wait()


if __name__ == '__main__':
    main()
