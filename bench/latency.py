"""One purchase through the API, end to end, at a fixed offered rate (bench/latency.sh runs it).

An app's road: POST /v1/purchases (a signed transaction bought at the simulator) answers 202
with a job id; GET /v1/jobs/{id}?wait=10 answers once the receipt job has finished. Purchases
start on a fixed schedule (open loop: a slow answer does not slow the next start), each on a
keep-alive connection of its own while it runs. Latency is from the POST's start to the end
of the GET's answer. Everything runs on the same 2 cores: redis-server, the simulator,
`entitle api`, one `entitle worker` (--queues default=32) and this client.

Reported per rate: p50/p90/p99/max of the purchase, how long after its job finished each
long-poll was answered (the job record's finishedAt to the answer's arrival, same clock, ms
resolution), and the simulator's part apart: the worker's `apple` phase (Get All Subscription
Statuses for the subscriptions, half the purchases, and the simulator's clock unless
ENTITLE_APPLE_CLOCK=wall) per subscription.

Usage: bench/latency.sh [RATES] [SECONDS]   (default 250,500,1000 and 5 s each)
"""
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import redis

import simulator_purchases
from wrk_load import wait_http

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN') or os.path.join(ROOT, '.build', 'release', 'entitle')
PORT = 6394
API_PORT, METRICS_PORT = 18180, 18190
TOKEN = 'bench-token-0123456789'
RATES = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else '250,500,1000').split(',')]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
r = redis.Redis(port=PORT)


class Connection:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls):
        reader, writer = await asyncio.open_connection('127.0.0.1', API_PORT)
        return cls(reader, writer)

    async def request(self, method, path, body=b''):
        head = (f'{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n'
                f'Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n').encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b'\r\n', b''):
                break
            name, _, value = line.decode().partition(':')
            if name.lower() == 'content-length':
                length = int(value)
        return status, await self.reader.readexactly(length)


async def run_rate(rate, purchases, offset):
    idle = []
    latencies, wakes, errors = [], [], 0

    async def one(index, purchase):
        nonlocal errors
        connection = idle.pop() if idle else await Connection.open()
        started = time.perf_counter()
        try:
            body = json.dumps({'customer': f'r{rate}-{index}@example.com', 'signedTransaction': purchase['signedTransaction']}).encode()
            status, answer = await connection.request('POST', '/v1/purchases', body)
            if status != 202:
                errors += 1
                return
            job = json.loads(answer)['jobId']
            status, answer = await connection.request('GET', f'/v1/jobs/{job}?wait=10')
            arrived_ms = time.time() * 1000
            record = json.loads(answer)
            if status != 200 or record.get('status') != 'succeeded':
                errors += 1
                return
            latencies.append((time.perf_counter() - started) * 1000)
            if record.get('finishedAt'):
                wakes.append(arrived_ms - record['finishedAt'])
            idle.append(connection)
        except Exception:
            errors += 1

    tasks = []
    began = time.perf_counter()
    n = int(rate * SECONDS)
    for i in range(n):
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(offset + i, purchases[offset + i])))
    offered = n / (time.perf_counter() - began)
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.writer.close()
    return offered, latencies, wakes, errors


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float('nan')


def apple_phase():
    """The worker's `apple` phase so far: count, sum and histogram buckets."""
    text = urllib.request.urlopen(f'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=10).read().decode()
    buckets = [(float('inf') if le == '+Inf' else float(le), float(v))
               for le, v in re.findall(r'entitle_receipt_phase_seconds_bucket\{[^}]*phase="apple"[^}]*le="([^"]+)"[^}]*\} ([0-9.e+-]+)', text)]
    buckets += [(float('inf') if le == '+Inf' else float(le), float(v))
                for le, v in re.findall(r'entitle_receipt_phase_seconds_bucket\{le="([^"]+)",phase="apple"\} ([0-9.e+-]+)', text)]
    count = sum(float(v) for v in re.findall(r'entitle_receipt_phase_seconds_count\{phase="apple"\} ([0-9.e+-]+)', text))
    total = sum(float(v) for v in re.findall(r'entitle_receipt_phase_seconds_sum\{phase="apple"\} ([0-9.e+-]+)', text))
    return count, total, sorted(buckets)


def main():
    catalog_path = simulator_purchases.unlimited_catalog(ROOT)
    r.flushall()
    sim, simulator = simulator_purchases.start(BIN)
    total = sum(int(rate * SECONDS) for rate in RATES)
    purchases = simulator_purchases.buy(simulator, total)
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator, ENTITLE_CATALOG=catalog_path,
               ENTITLE_LOG_LEVEL='error', **simulator_purchases.development_secrets(TOKEN))
    redis_url = f'redis://127.0.0.1:{PORT}'
    api = subprocess.Popen([BIN, 'api', '--port', str(API_PORT), '--redis', redis_url, '--prefix', 'bench'], env=env,
                           stdout=subprocess.DEVNULL)
    worker = subprocess.Popen([BIN, 'worker', '--redis', redis_url, '--prefix', 'bench', '--queues', 'default=32', '--log-level', 'error',
                               '--metrics-port', str(METRICS_PORT)], env=env)
    rows = []
    try:
        wait_http(f'http://127.0.0.1:{API_PORT}/readyz')
        while r.zcard('bench:{default}:consumers') < 1:
            time.sleep(0.05)
        offset = 0
        for rate in RATES:
            before = apple_phase()
            offered, latencies, wakes, errors = asyncio.run(run_rate(rate, purchases, offset))
            after = apple_phase()
            offset += int(rate * SECONDS)
            # Statuses calls: one per subscription (every other purchase); the clock's phase
            # entries are ~0 with ENTITLE_APPLE_CLOCK=wall, and a simulator clock read otherwise.
            subscriptions = sum(1 for i in range(offset - int(rate * SECONDS), offset)
                                if purchases[i].get('productId', '').endswith('monthly') or i % 2 == 1)
            rows.append({
                'rate': rate, 'offered_per_s': round(offered), 'purchases': len(latencies), 'errors': errors,
                'p50_ms': round(quantile(latencies, 0.5), 2), 'p90_ms': round(quantile(latencies, 0.9), 2),
                'p99_ms': round(quantile(latencies, 0.99), 2), 'max_ms': round(max(latencies, default=float('nan')), 2),
                'wake_p50_ms': round(quantile(wakes, 0.5), 2), 'wake_p99_ms': round(quantile(wakes, 0.99), 2),
                'apple_calls': subscriptions,
                'apple_mean_ms': round(1000 * (after[1] - before[1]) / subscriptions, 2) if subscriptions else None,
            })
    finally:
        for p in (api, worker, sim):
            p.terminate()
            p.wait()
    print(json.dumps(rows))
    for row in rows:
        print(f"{row['rate']:,}/s offered ({row['offered_per_s']:,} achieved, {row['purchases']:,} answered, {row['errors']} errors): "
              f"purchase p50 {row['p50_ms']} ms, p90 {row['p90_ms']} ms, p99 {row['p99_ms']} ms, max {row['max_ms']} ms; "
              f"long-poll answered {row['wake_p50_ms']} ms (p50) / {row['wake_p99_ms']} ms (p99) after its job finished; "
              f"the simulator (Apple's part): {row['apple_mean_ms']} ms per subscription on average ({row['apple_calls']} subscriptions)")


if __name__ == '__main__':
    main()
