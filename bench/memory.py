"""What a purchase costs in Redis, all in: `entitle run` (release; its API, one worker and the
simulator, ENTITLE_REDIS_URL pointing at a private redis-server) takes N purchases through
`POST /v1/purchases` (each bought at the simulator, its signed transaction posted for its own
customer), with the simulator's V1 and V2 notifications flowing to the API or switched off.
Once every job has finished and every notification was applied:
- bytes per purchase while the jobs' results are kept: `used_memory` after less before, over N;
  and over the second half alone (the purchases go in two halves, each settled): what one
  more purchase costs, without what a publisher's first purchases make once;
- bytes per customer at rest: the same once every key with a TTL is gone (deleted here, as
  their TTLs would: job records, idempotency and marker keys), over N;
- the customer's hash alone (`MEMORY USAGE`, a sample).
Each scenario (product kind x notifications) runs with BEFORE's binary and this tree's, in
turns, for the figures side by side.

Usage: bench/memory.sh [N] [BEFORE_BIN]   (needs redis-server and ~/.peers-venv with redis-py)
"""
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
AFTER = os.path.join(ROOT, '.build', 'release', 'entitle')
N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
BEFORE = sys.argv[2] if len(sys.argv) > 2 else ''
PORT = 6396
r = redis.Redis(port=PORT)
PRODUCTS = {'subscription': 'com.entitle.demo.premium.monthly', 'consumable': 'com.entitle.demo.credits.100'}


def call(url, body=None, token=None):
    headers = {'Content-Type': 'application/json'}
    if token:
        headers['Authorization'] = f'Bearer {token}'
    for _ in range(100):
        request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            # The API's per-publisher rate limit (a fast scenario at N = 1000): wait as told, then again.
            if error.code != 429:
                raise
            time.sleep(float(error.headers.get('Retry-After') or 1))
    raise RuntimeError(f'{url} answered 429 a hundred times')


def used():
    return r.info('memory')['used_memory']


def breakdown():
    """Bytes by kind of key (ids replaced by *), largest first, per purchase."""
    sizes = collections.Counter()
    for key in r.scan_iter(count=1000):
        name = key.decode(errors='replace')
        kind = re.sub(r'(:job:|:idem:|:unique:|:customer:|:owner:|:notification:|:receipt:|:renewals?:|:fence:|:lock:)[^:]*$', r'\1*', name)
        kind = re.sub(r'\{demo/\d\d\}', '{demo/NN}', kind)
        kind = re.sub(r':applied:\{[^}]*\}:\d+$', ':applied:{P/B}:G', kind)
        kind = re.sub(r'[0-9a-f]{32}', '*', kind)
        sizes[kind] += r.memory_usage(key) or 0
    return {k: round(v / N) for k, v in sizes.most_common(12)}


def customer_keys():
    """A customer's own keys at rest, per customer (`MEMORY USAGE`, every key, not sampled):
    its hash, the owner and fence keys of its purchases, and its share of the renewal and
    holder indexes. The event log (a publisher's partition, trimmed by age) is not a
    customer's key and is counted apart."""
    parts = collections.Counter()
    for key in r.scan_iter(count=1000):
        name = key.decode(errors='replace')
        for kind, pattern in (('hash', ':customer:m'), ('owner', ':owner:'), ('fence', ':fence:'), ('renewal index', ':renewals'),
                              ('holder indexes', 'holders:'), ('event log', ':events')):
            if pattern in name:
                parts[kind] += r.memory_usage(key, samples=0) or 0
                break
    per = {kind: round(parts[kind] / N) for kind in parts}
    per['customer'] = sum(v for k, v in per.items() if k != 'event log')
    return per


def scenario(binary, kind, notifications):
    r.flushall()
    env = dict(os.environ, ENTITLE_REDIS_URL=f'redis://127.0.0.1:{PORT}')
    run = subprocess.Popen([binary, 'run', '--json', '--port', '0', '--simulator-port', '0', '--concurrency', '16'],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = json.loads(run.stdout.readline())
        api, simulator, token = ready['api'], ready['simulator'], ready['publisherToken']
        call(simulator + '/simulator/notifications/delivery', {'enabled': notifications})
        time.sleep(1)
        before = used()

        def purchase(i):
            bought = call(simulator + '/simulator/purchases', {'bundleId': 'com.entitle.demo', 'productId': PRODUCTS[kind]})
            job = call(api + '/v1/purchases', {'customer': f'm{i}@example.com', 'signedTransaction': bought['signedTransaction']}, token)
            return job['jobId']

        def settle():
            """Nothing pending at the simulator, nothing queued or running, three times in a row."""
            quiet = 0
            while quiet < 3:
                pending = call(simulator + '/simulator/notifications/pending')['pending']
                stats = [k for k in r.scan_iter('*:{default}:pending', count=1000)]
                queued = sum(r.llen(k) for k in stats)
                active = sum(r.llen(k) for k in r.scan_iter('*:{default}:active:*', count=1000))
                scheduled_due = sum(r.zcount(k, '-inf', int(time.time() * 1000) + 2000) for k in r.scan_iter('*:{default}:scheduled', count=1000))
                quiet = quiet + 1 if pending == 0 and queued == 0 and active == 0 and scheduled_due == 0 else 0
                time.sleep(0.5)
        # In two halves: the second half's growth is what one more purchase costs, without
        # the part a publisher's first purchases make once (its marker sets, its streams' nodes).
        half = N // 2
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(purchase, range(half)))
        settle()
        halfway = used()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(purchase, range(half, N)))
        settle()
        kept = used()
        kept_parts = breakdown() if os.environ.get('BREAKDOWN') else None
        hashes = [k for k in r.scan_iter('*:ent:{demo/*}:customer:m*', count=1000)]
        sample = hashes[:: max(1, len(hashes) // 100)][:100]
        customer = sum(r.memory_usage(k) or 0 for k in sample) / max(1, len(sample))
        # Every key with a TTL gone, as it would be once the TTLs pass.
        volatile = [k for k in r.scan_iter(count=1000) if r.pttl(k) > 0]
        for i in range(0, len(volatile), 500):
            r.delete(*volatile[i:i + 500])
        rest = used()
        rest_parts = breakdown() if os.environ.get('BREAKDOWN') else None
        own = customer_keys()
        if kept_parts:
            print(json.dumps({'kind': kind, 'notifications': notifications, 'binary': binary, 'kept': kept_parts, 'rest': rest_parts}), flush=True)
        receipts = sum(1 for _ in r.scan_iter('*:ent:demo:receipt:*', count=1000))
        return {'kept': round((kept - before) / N), 'marginal': round((kept - halfway) / (N - half)),
                'rest': round((rest - before) / N), 'customer': round(customer),
                'receipts': receipts, 'own': own}
    finally:
        run.terminate()
        run.wait()


def main():
    rows = []
    for kind in ('subscription', 'consumable'):
        for notifications in (True, False):
            row = {'kind': kind, 'notifications': notifications}
            if BEFORE:
                row['before'] = scenario(BEFORE, kind, notifications)
            row['after'] = scenario(AFTER, kind, notifications)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(f'N = {N} purchases each; bytes per purchase with results kept (over all N, and over the second half alone) / per customer at rest / customer hash; stored receipts')
    for row in rows:
        line = f"{row['kind']:>12} notifications {'on ' if row['notifications'] else 'off'}"
        for side in ('before', 'after'):
            if side in row:
                v = row[side]
                line += f" | {side}: {v['kept']:>6,} ({v['marginal']:>6,}) / {v['rest']:>5,} / {v['customer']:>5,} B, {v['receipts']} receipts"
        print(line)
    print()
    print("a customer's own keys at rest, per customer (hash, owner, fence, its share of the renewal and holder indexes; the event log apart):")
    for row in rows:
        for side in ('before', 'after'):
            if side in row:
                own = row[side]['own']
                parts = ', '.join(f'{k} {v:,}' for k, v in sorted(own.items()) if k != 'customer')
                print(f"{row['kind']:>12} notifications {'on ' if row['notifications'] else 'off'} {side:>6}: {own['customer']:,} B ({parts})")


if __name__ == '__main__':
    main()
