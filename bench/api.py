"""The API under load, on loopback (bench/api.sh runs it):

1. enqueue: wrk POSTs /v1/purchases (a new transaction id each time) to `entitle api`, and
   the same wrk, in the same run, to the peer (bench/api_peer.py: Starlette + uvicorn +
   arq, 2 workers); requests/s and p50/p99 latency, and the ratios.
2. end to end: purchases bought at the simulator, handed to the API as apps would
   (signed transactions), run by 1, 2 and 4 `entitle worker` processes; purchases/s from
   the first POST to the last job finished.
"""
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import redis

import simulator_purchases

from wrk_load import wait_http, wrk_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.path.join(ROOT, '.build', 'release', 'entitle')
PORT = 6393
API_PORT, PEER_PORT = 18080, 18090
TOKEN = 'bench-token-0123456789'
DURATION = int(os.environ.get('BENCH_SECONDS', '15'))
CONNECTIONS = int(os.environ.get('BENCH_CONNECTIONS', '32'))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
r = redis.Redis(port=PORT)


def wrk(url, seconds):
    return wrk_purchases(url, seconds, CONNECTIONS, TOKEN)


def post(url, body, token=None):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})
    if token:
        request.add_header('Authorization', f'Bearer {token}')
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def memory(procs, bought):
    """What one subscription keeps in Redis for good (job records expire after a day): its
    customer hash, the owner index, the fence counter, its share of the renewal index."""
    subscriptions = [i for i in range(len(bought)) if i % 2 == 1]
    # Customers' hashes live under their partition's tag: found by name.
    hashes = {k.decode().rsplit(':customer:', 1)[1]: k for k in r.scan_iter('bench:ent:*:customer:*', count=1000)}
    total = 0
    for i in subscriptions:
        original = bought[i]['originalTransactionId']
        keys = [hashes.get(f'c{procs}-{i}@example.com', b'missing'), f'bench:ent:demo:owner:{original}', f'bench:ent:demo:fence:{{{original}}}']
        total += sum(r.memory_usage(k, samples=0) or 0 for k in keys)
    renewals = sum(r.memory_usage(k, samples=0) or 0 for k in r.scan_iter('bench:ent:renewals*'))
    per = (total + renewals) / len(subscriptions)
    return {'bytes_per_subscription': round(per), 'gib_per_million': round(per * 1e6 / 2**30, 2)}


def main():
    catalog_path = simulator_purchases.unlimited_catalog(ROOT)
    r.flushall()
    sim = subprocess.Popen([BIN, 'simulator', '--port', '0', '--log-level', 'error'], stdout=subprocess.PIPE, text=True)
    simulator = next(line.split()[-1] for line in sim.stdout if 'listening on' in line)
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator, ENTITLE_CATALOG=catalog_path,
               ENTITLE_LOG_LEVEL='error', **simulator_purchases.development_secrets(TOKEN))
    redis_url = f'redis://127.0.0.1:{PORT}'
    api = subprocess.Popen([BIN, 'api', '--port', str(API_PORT), '--redis', redis_url, '--prefix', 'bench'], env=env, stdout=subprocess.DEVNULL)
    wait_http(f'http://127.0.0.1:{API_PORT}/readyz')
    venv = os.path.expanduser(os.environ.get('API_PEER_VENV', '~/.api-peer-venv'))
    peer = subprocess.Popen([os.path.join(venv, 'bin', 'uvicorn'), '--workers', '2', '--port', str(PEER_PORT), '--log-level', 'warning',
                             '--no-access-log', '--app-dir', os.path.join(ROOT, 'bench'), 'api_peer:app'],
                            env=dict(os.environ, TOKEN=TOKEN, PEER_REDIS_PORT=str(PORT)))
    time.sleep(2)
    results = {}
    try:
        # 1. Enqueue rate, alternating so both see the same machine; the best of two each.
        for name, url in (('entitle', f'http://127.0.0.1:{API_PORT}/v1/purchases'), ('peer', f'http://127.0.0.1:{PEER_PORT}/v1/purchases')):
            wrk(url, 3)  # warm up
        runs = {'entitle': [], 'peer': []}
        for _ in range(2):
            for name, url in (('entitle', f'http://127.0.0.1:{API_PORT}/v1/purchases'), ('peer', f'http://127.0.0.1:{PEER_PORT}/v1/purchases')):
                runs[name].append(wrk(url, DURATION))
        for name in runs:
            results[name] = max(runs[name], key=lambda x: x['per_s'])
        enqueued = sum(int(v) for k, v in r.hgetall('bench:{default}:stats').items() if k.startswith(b'enqueued:'))
        results['entitle_jobs_in_redis'] = enqueued
        peer.terminate()
        peer.wait()

        # 2. End to end with 1, 2 and 4 worker processes.
        products = ['com.entitle.demo.credits.100', 'com.entitle.demo.premium.monthly']
        e2e = []
        for procs in (1, 2, 4):
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                bought = list(pool.map(lambda i: post(simulator + '/simulator/purchases', {'bundleId': 'com.entitle.demo', 'productId': products[i % 2]}), range(N)))
            for key in r.scan_iter('bench:*', count=10_000):
                r.delete(key)
            workers = [subprocess.Popen([BIN, 'worker', '--redis', redis_url, '--prefix', 'bench', '--queues', 'default=32', '--log-level', 'error'], env=env)
                       for _ in range(procs)]
            while r.zcard('bench:{default}:consumers') < procs:
                time.sleep(0.05)
            began = time.time()

            def submit(chunk):
                connection = http.client.HTTPConnection('127.0.0.1', API_PORT)
                for i in chunk:
                    body = json.dumps({'customer': f'c{procs}-{i}@example.com', 'signedTransaction': bought[i]['signedTransaction']})
                    connection.request('POST', '/v1/purchases', body, {'Content-Type': 'application/json', 'Authorization': f'Bearer {TOKEN}'})
                    response = connection.getresponse()
                    response.read()
                    assert response.status == 202, response.status
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(submit, [range(k, N, 8) for k in range(8)]))
            posted = time.time() - began
            while int(r.hget('bench:{default}:stats', 'succeeded:receipt') or 0) + int(r.hget('bench:{default}:stats', 'dead:receipt') or 0) < N:
                time.sleep(0.02)
            seconds = time.time() - began
            failed = int(r.hget('bench:{default}:stats', 'dead:receipt') or 0)
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait()
            e2e.append({'workers': procs, 'purchases_per_s': round(N / seconds), 'posting_s': round(posted, 2), 'failed': failed})
            if procs == 1:
                results['memory'] = memory(procs, bought)
        results['end_to_end'] = e2e
    finally:
        for p in (api, peer, sim):
            if p.poll() is None:
                p.terminate()
                p.wait()
    e, p = results['entitle'], results['peer']
    print(json.dumps(results))
    print(f"enqueue, wrk -t2 -c{CONNECTIONS} {DURATION}s: entitle api {e['per_s']:,.0f} req/s, p50 {e['p50_ms']:.2f} ms, p99 {e['p99_ms']:.2f} ms "
          f"({e['errors']} errors, {e['non2xx']} non-2xx); peer (Starlette+uvicorn+arq, 2 workers) {p['per_s']:,.0f} req/s, p99 {p['p99_ms']:.2f} ms")
    print(f"  -> entitle/peer: {e['per_s'] / p['per_s']:.1f}x the requests/s, {p['p99_ms'] / e['p99_ms']:.1f}x lower p99")
    for row in results['end_to_end']:
        print(f"end to end, {row['workers']} worker process(es): {row['purchases_per_s']:,} purchases/s ({N} signed transactions, half subscriptions; "
              f"{row['failed']} failed; all POSTed in {row['posting_s']} s)")
    m = results['memory']
    print(f"Redis memory per subscription customer (customer hash, owner index, fence, renewal index): {m['bytes_per_subscription']:,} bytes "
          f"-> {m['gib_per_million']} GiB per million subscriptions")


if __name__ == '__main__':
    main()
