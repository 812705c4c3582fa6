"""bench/api_checks.sh's runner: `entitle api` before and after, alternately, under the same
wrk load (POST /v1/purchases with the publisher's secret key, a new transaction id each
time: bench/wrk_purchases.lua), on one private redis-server flushed between rounds.
BENCH_IDLE_CONNECTIONS=N holds N more keep-alive connections open, each idle after one
request, during every round (a public server's usual state: many idle clients)."""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

import redis

from wrk_load import wait_http, wrk_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BEFORE, AFTER, BASE = sys.argv[1], sys.argv[2], sys.argv[3]
REDIS_PORT, API_PORT = 6394, 18081
TOKEN = 'bench-token-0123456789'
SECONDS = int(os.environ.get('BENCH_SECONDS', '10'))
ROUNDS = int(os.environ.get('BENCH_ROUNDS', '3'))
CONNECTIONS = int(os.environ.get('BENCH_CONNECTIONS', '32'))
IDLE = int(os.environ.get('BENCH_IDLE_CONNECTIONS', '0'))
r = redis.Redis(port=REDIS_PORT)


def run(binary, catalog):
    env = dict(os.environ, ENTITLE_CATALOG=catalog, ENTITLE_ENV='production', BENCH_API_TOKEN=TOKEN,
               ENTITLE_REDIS_URL=f'redis://127.0.0.1:{REDIS_PORT}', ENTITLE_PREFIX='bench', ENTITLE_LOG_LEVEL='error')
    api = subprocess.Popen([binary, 'api', '--port', str(API_PORT)], env=env, stdout=subprocess.DEVNULL)
    try:
        wait_http(f'http://127.0.0.1:{API_PORT}/healthz')
        idle = [idle_connection() for _ in range(IDLE)]
        try:
            return wrk_purchases(f'http://127.0.0.1:{API_PORT}/v1/purchases', SECONDS, CONNECTIONS, TOKEN)
        finally:
            for connection in idle:
                connection.close()
    finally:
        api.terminate()
        api.wait()
        r.flushall()


def idle_connection():
    """A keep-alive connection that asked once and was answered, then waits."""
    connection = socket.create_connection(('127.0.0.1', API_PORT))
    connection.sendall(b'GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n')
    received = b''
    while b'\r\n\r\n' not in received:
        received += connection.recv(4096)
    return connection


def main():
    # A production catalog with no Apple secrets: the API needs no network.
    catalog = {'publishers': [{
        'id': 'demo', 'apps': [{'bundleId': 'com.entitle.demo', 'environments': ['Sandbox']}],
        'offers': [{'offerId': 'credits-100', 'productIds': ['com.entitle.demo.credits.100'], 'credits': 100}],
        'api': {'tokenVariables': ['BENCH_API_TOKEN'], 'rateLimit': {'perSecond': 10_000_000, 'burst': 10_000_000}},
    }]}
    with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
        json.dump(catalog, f)
    results = {'before': [], 'after': []}
    for round_ in range(ROUNDS):
        order = [('before', BEFORE), ('after', AFTER)] if round_ % 2 == 0 else [('after', AFTER), ('before', BEFORE)]
        for name, binary in order:
            result = run(binary, f.name)
            results[name].append(result)
            print(f'round {round_ + 1} {name}: {result["per_s"]:.0f} req/s, p50 {result["p50_ms"]:.2f} ms, p99 {result["p99_ms"]:.2f} ms, '
                  f'errors {result["errors"]}, non-2xx {result["non2xx"]}', flush=True)
    os.unlink(f.name)
    before = statistics.median(x['per_s'] for x in results['before'])
    after = statistics.median(x['per_s'] for x in results['after'])
    p99b = statistics.median(x['p99_ms'] for x in results['before'])
    p99a = statistics.median(x['p99_ms'] for x in results['after'])
    print(json.dumps({'base': BASE, 'rounds': ROUNDS, 'seconds': SECONDS, 'connections': CONNECTIONS, 'idle_connections': IDLE,
                      'before_req_s': round(before), 'after_req_s': round(after), 'after_over_before': round(after / before, 3),
                      'before_p99_ms': p99b, 'after_p99_ms': p99a}))


main()
