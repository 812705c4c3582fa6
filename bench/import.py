"""Import: N purchases bought from the simulator (half consumables, half monthly
subscriptions), written as a CSV of `customer,originalTransactionId` lines, imported with
`entitle import` (release build) and run by one `entitle worker` process (ENTITLE_ENV=
development: "Apple" is the local simulator, asked Get Transaction Info per line and the
statuses per subscription). Reports lines/s queued and applied, Redis bytes per imported
customer (all keys, with the jobs' records kept for their 24 hours; and the customer's own
hash, MEMORY USAGE of a sample), and, in the same run, the rate of the same purchases as
plain receipt jobs carrying their signed transactions, for the ratio.

Usage: bench/import.sh [N]   (needs redis-server and ~/.peers-venv with redis-py)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import redis

import simulator_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN') or os.path.join(ROOT, '.build', 'release', 'entitle')
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
PORT = 6394
r = redis.Redis(port=PORT)


def drain(prefix, simulator, job_type, n):
    """One worker process until n jobs of job_type finished; jobs/s from first start to last finish."""
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator)
    worker = subprocess.Popen([BIN, 'worker', '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', prefix, '--queues', 'default=32',
                               '--log-level', 'error', '--no-reports'], env=env)
    stats = f'{prefix}:{{default}}:stats'
    deadline = time.time() + 3600
    while int(r.hget(stats, f'succeeded:{job_type}') or 0) + int(r.hget(stats, f'dead:{job_type}') or 0) < n and time.time() < deadline:
        time.sleep(0.2)
    worker.terminate()
    worker.wait()
    started, finished, failed = [], [], 0
    ids = [k.decode().rsplit(':', 1)[1] for k in r.scan_iter(f'{prefix}:{{default}}:job:*', count=1000)]
    for i in range(0, len(ids), 1000):
        pipe = r.pipeline()
        for job_id in ids[i:i + 1000]:
            pipe.hmget(f'{prefix}:{{default}}:job:{job_id}', 'startedAt', 'finishedAt', 'status', 'type')
        for s, f, status, kind in pipe.execute():
            if kind != job_type.encode():
                continue
            if s and f:
                started.append(int(s))
                finished.append(int(f))
            failed += status != b'succeeded'
    return len(started) / ((max(finished) - min(started)) / 1000), failed


def main():
    r.flushall()
    sim, simulator = simulator_purchases.start(BIN)
    began = time.time()
    bought = simulator_purchases.buy(simulator, N, {'useIntroductoryOffer': False})
    bought_seconds = time.time() - began
    lines = ['customer,proof'] + [f'c{i}@example.com,{b["originalTransactionId"]}' for i, b in enumerate(bought)]
    path = os.path.join(tempfile.mkdtemp(), 'customers.csv')
    open(path, 'w').write('\n'.join(lines) + '\n')

    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator)
    prefix = 'bench-import'
    before = r.info('memory')['used_memory']
    began = time.time()
    out = subprocess.run([BIN, 'import', '--publisher', 'demo', '--json', path, '--redis', f'redis://127.0.0.1:{PORT}',
                          '--prefix', prefix], env=env, capture_output=True, text=True)
    queued_seconds = time.time() - began
    summary = json.loads(out.stdout)
    rate, failed = drain(prefix, simulator, 'receipt', N)
    after = r.info('memory')['used_memory']
    keys = [k for k in r.scan_iter(f'{prefix}:ent:{{demo/*}}:customer:*', count=1000)]
    sample = keys[:: max(1, len(keys) // 200)][:200]
    customer_bytes = sum(r.memory_usage(k) or 0 for k in sample) / max(1, len(sample))

    # The same purchases as plain receipt jobs (signed transactions, no Apple lookup of the
    # transaction) in the same run, for the ratio.
    receipts = f'{prefix}-receipts'
    with tempfile.NamedTemporaryFile('w', suffix='.jsonl', delete=False) as handle:
        for i, b in enumerate(bought):
            handle.write(json.dumps({'customer': f'd{i}@example.com', 'signedTransaction': b['signedTransaction']}) + '\n')
    subprocess.run([BIN, 'import', '--publisher', 'demo', handle.name, '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', receipts],
                   env=env, capture_output=True, text=True, check=True)
    signed_rate, signed_failed = drain(receipts, simulator, 'receipt', N)
    sim.terminate()
    sim.wait()
    result = {
        'n': N, 'bought_seconds': round(bought_seconds, 1), 'queued': summary['queued'], 'refused': len(summary['refused']),
        'queued_lines_per_s': round(N / queued_seconds), 'applied_lines_per_s': round(rate), 'failed': failed,
        'redis_bytes_per_imported_customer_with_jobs': round((after - before) / N),
        'customer_hash_bytes': round(customer_bytes),
        'signed_transaction_lines_per_s_same_run': round(signed_rate), 'signed_failed': signed_failed,
    }
    print(json.dumps(result))
    print(f'{N:,} lines: queued at {N / queued_seconds:,.0f}/s, applied at {rate:,.0f}/s ({failed} failed) by one worker; '
          f'signed-transaction lines {signed_rate:,.0f}/s in the same run ({rate / signed_rate:.2f}x); '
          f'Redis {(after - before) / N:,.0f} B per imported customer with its job records, customer hash {customer_bytes:,.0f} B')


if __name__ == '__main__':
    main()
