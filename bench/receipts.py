"""End-to-end receipt jobs: signed transactions bought from the simulator, enqueued as
`receipt` jobs, run by 1 and 2 `entitle worker` processes (ENTITLE_ENV=development, so
"Apple" is the local simulator). Same run: the no-op job rate of the same workers, and
Apple's own Python library verifying the same transactions, for ratios.

Usage: bench/receipts.sh [N]  (builds the release binary, needs redis-server and
~/.peers-venv with redis-py; ~/.asl-venv with app-store-server-library for the peer).
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid

import redis

import simulator_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN') or os.path.join(ROOT, '.build', 'release', 'entitle')
PROCESSES = [int(p) for p in os.environ.get('BENCH_PROCESSES', '1,2').split(',')]
# `--no-reports`: the workers leave the folding of the event log to others (after the event log only).
EXTRA_WORKER_ARGS = os.environ.get('BENCH_WORKER_ARGS', '').split()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
PORT = 6392
r = redis.Redis(port=PORT)
ENQUEUE = r.register_script(open(os.path.join(ROOT, 'Jobs', 'enqueue.lua')).read())


def enqueue(prefix, jobs):
    now = int(time.time() * 1000)
    for type_, payload in jobs:
        job_id = uuid.uuid4().hex
        job_key = f'{prefix}:{{default}}:job:{job_id}'
        keys = [f'{prefix}:{{default}}:pending', f'{prefix}:{{default}}:scheduled', f'{prefix}:{{default}}:stats',
                f'{prefix}:{{default}}:recent', job_key, job_key, job_key, job_key]
        ENQUEUE(keys=keys, args=[now, 86_400_000, 'default', 200, job_id, type_, json.dumps(payload), 0, 0, '', '', '', ''])
    r.sadd(f'{prefix}:queues', 'default')


def run_workers(prefix, procs, job_type, n, simulator, metrics_base):
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator)
    workers = [subprocess.Popen([BIN, 'worker', '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', prefix, '--queues', 'default=32',
                                 '--log-level', 'error', '--metrics-port', str(metrics_base + i)] + EXTRA_WORKER_ARGS, env=env)
               for i in range(procs)]
    stats = f'{prefix}:{{default}}:stats'
    deadline = time.time() + 600
    while int(r.hget(stats, f'succeeded:{job_type}') or 0) + int(r.hget(stats, f'dead:{job_type}') or 0) < n and time.time() < deadline:
        time.sleep(0.05)
    split = {}
    for i in range(procs):
        text = urllib.request.urlopen(f'http://127.0.0.1:{metrics_base + i}/metrics', timeout=10).read().decode()
        for phase, value in re.findall(r'entitle_receipt_phase_seconds_sum\{phase="(\w+)"\} ([0-9.e+-]+)', text):
            split[phase] = split.get(phase, 0) + float(value)
    for w in workers:
        w.terminate()
    for w in workers:
        w.wait()
    ids = [k.decode().rsplit(':', 1)[1] for k in r.scan_iter(f'{prefix}:{{default}}:job:*', count=1000)]
    started, finished, failed = [], [], 0
    for i in range(0, len(ids), 500):
        pipe = r.pipeline()
        for job_id in ids[i:i + 500]:
            pipe.hmget(f'{prefix}:{{default}}:job:{job_id}', 'startedAt', 'finishedAt', 'status', 'type')
        for s, f, status, kind in pipe.execute():
            if kind != job_type.encode():
                continue  # follow-ups: renewal checks scheduled for the subscriptions' expiry
            if s and f:
                started.append(int(s))
                finished.append(int(f))
            failed += status != b'succeeded'
    seconds = (max(finished) - min(started)) / 1000
    return len(started) / seconds, failed, split


def main():
    r.flushall()
    sim, simulator = simulator_purchases.start(BIN)
    bought = simulator_purchases.buy(simulator, N)
    transactions = [b['signedTransaction'] for b in bought]
    rows = []
    for procs in PROCESSES:
        prefix = f'bench-receipts-{procs}'
        enqueue(prefix, [('receipt', {'publisher': 'demo', 'customer': f'c{i}@example.com', 'signedTransaction': jws})
                         for i, jws in enumerate(transactions)])
        rate, failed, split = run_workers(prefix, procs, 'receipt', N, simulator, 9300 + procs * 10)
        noop_prefix = f'bench-noop-{procs}'
        enqueue(noop_prefix, [('noop', {})] * N)
        noop_rate, _, _ = run_workers(noop_prefix, procs, 'noop', N, simulator, 9400 + procs * 10)
        rows.append((procs, rate, failed, split, noop_rate))
    # The peer: Apple's library verifying the same signed transactions (verification only,
    # one thread, per CPU second), against the simulator's root.
    peer = None
    venv = os.path.expanduser(os.environ.get('VERIFY_PEER_VENV', '~/.asl-venv'))
    if os.path.exists(os.path.join(venv, 'bin', 'python')):
        files = []
        for i, jws in enumerate(transactions[:2]):
            files.append(f'/tmp/bench-receipts-{i}.jws')
            open(files[-1], 'w').write(jws)
        open('/tmp/bench-receipts-root.cer', 'wb').write(urllib.request.urlopen(simulator + '/simulator/root.cer').read())
        out = subprocess.run([os.path.join(venv, 'bin', 'python'), os.path.join(ROOT, 'bench', 'verify_peer.py'), '400',
                              'com.entitle.demo', '/tmp/bench-receipts-root.cer'] + files, capture_output=True, text=True)
        peer = json.loads(out.stdout)['per_cpu_s'] if out.returncode == 0 else None
    sim.terminate()
    sim.wait()
    print(json.dumps({'n': N, 'rows': [
        {'processes': p, 'receipt_jobs_per_s': round(rate), 'failed': failed, 'noop_jobs_per_s': round(noop),
         'split_seconds': {k: round(v, 2) for k, v in split.items()}} for p, rate, failed, split, noop in rows],
        'apple_python_verifications_per_cpu_s': peer and round(peer)}))
    for p, rate, failed, split, noop in rows:
        total = split.get('total', 0) or 1
        parts = ', '.join(f"{k} {100 * split.get(k, 0) / total:.0f}%" for k in ('verify', 'apple', 'store'))
        rest = 100 * (total - sum(split.get(k, 0) for k in ('verify', 'apple', 'store'))) / total
        print(f'{p} process(es): {rate:,.0f} receipt jobs/s ({failed} failed), {noop:,.0f} no-op jobs/s in the same run '
              f'-> a receipt job costs {noop / rate:.1f} no-op jobs; time in handlers: {parts}, rest {rest:.0f}%')
        if peer:
            print(f'   vs Apple\'s Python library verifying alone: {peer:,.0f}/cpu-s -> whole jobs at {rate / peer:.1f}x its bare verification rate')


if __name__ == '__main__':
    main()
