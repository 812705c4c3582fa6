"""The queue at its limit, Entitle beside Sidekiq on one private redis-server (issue 31's figures
that the shared peers harness does not print):

1. Bulk enqueue of N no-op jobs (100,000): Sidekiq's `Client.push_bulk`, 1,000 a call
   (bench/queue_sidekiq.rb), against `entitle enqueue noop --count N` (500 a script call): jobs/s
   as each producer times itself, and Redis memory per pending job (`used_memory` after less
   before, over N), in turns for ROUNDS rounds; medians.
2. Redis CPU per job lifecycle over M no-op jobs (20,000): the redis-server process's CPU
   (`used_cpu_user` + `used_cpu_sys`) while the jobs are enqueued (in bulk, as above), then while
   one worker process runs them all (Sidekiq: 10 threads, BRPOP; Entitle: `entitle worker`,
   concurrency 64: claim, start, ack), over M; and the processing step by command (`INFO
   commandstats`, commands inside scripts counted too), in microseconds per job.

With BEFORE_BIN (another build's `entitle`), that build runs each step too, in turns: the
figures before and after a change, beside Sidekiq's, from one run.

Usage: bench/queue_limits.py [N] [M] [ROUNDS]   (bench/queue.sh runs it with the harness's figures;
needs redis-server, ruby-sidekiq and ~/.peers-venv with redis-py)
"""
import os
import statistics
import subprocess
import sys
import time

import redis
from private_redis import private_redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
PEERS = os.path.abspath(os.path.join(ROOT, '..', 'shared', 'bench', 'peers'))
BIN = os.environ.get('ENTITLE_BIN', os.path.join(ROOT, '.build', 'release', 'entitle'))
BEFORE = os.environ.get('BEFORE_BIN', '')
SIDES = ['sidekiq'] + (['before'] if BEFORE else []) + ['entitle']
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
M = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
PORT = int(os.environ.get('BENCH_QUEUE_PORT', '6394'))
URL = f'redis://127.0.0.1:{PORT}'
r = redis.Redis(port=PORT)


def cpu():
    info = r.info('cpu')
    return info['used_cpu_user'] + info['used_cpu_sys']


def used():
    return r.info('memory')['used_memory']


def enqueue(side, n):
    """Seconds the producer spent enqueueing n no-op jobs, as it measures itself."""
    if side == 'sidekiq':
        out = subprocess.run(['ruby', os.path.join(ROOT, 'bench', 'queue_sidekiq.rb'), str(PORT), str(n)],
                             capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])
    binary = BEFORE if side == 'before' else BIN
    out = subprocess.run([binary, 'enqueue', 'noop', '--payload', '{}', '--count', str(n), '--quiet', '--redis', URL],
                         capture_output=True, text=True, check=True)
    return float(out.stderr.split(' in ')[1].split(' s')[0])


def bulk():
    rows = {side: [] for side in SIDES}
    for _ in range(ROUNDS):
        for side in SIDES:
            r.flushall()
            time.sleep(0.2)
            before = used()
            seconds = enqueue(side, N)
            rows[side].append((N / seconds, (used() - before) / N))
    return {side: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for side, v in rows.items()}


def worker(side):
    env = dict(os.environ, BENCH_REDIS_PORT=str(PORT))
    if side == 'sidekiq':
        return subprocess.Popen(['sidekiq', '-r', './sidekiq_jobs.rb', '-c', '10', '-q', 'default'], cwd=PEERS, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    binary = BEFORE if side == 'before' else BIN
    return subprocess.Popen([binary, 'worker', '--queues', 'default=64', '--redis', URL, '--log-level', 'warning'], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def done(side, m):
    if side == 'sidekiq':
        return r.llen('queue:default') == 0
    return int(r.hget('entitle:{default}:stats', 'succeeded:noop') or 0) >= m


def commandstats():
    return {k.replace('cmdstat_', ''): v['usec'] for k, v in r.info('commandstats').items()}


def lifecycle(side):
    r.flushall()
    r.config_resetstat()
    time.sleep(0.2)
    start = cpu()
    enqueue(side, M)
    enqueued = cpu()
    stats = commandstats()
    process = worker(side)
    try:
        deadline = time.time() + 300
        while not done(side, M) and time.time() < deadline:
            time.sleep(0.02)
        finished = cpu()
        after = commandstats()
    finally:
        process.terminate()
        process.wait()
    by_command = {c: (after[c] - stats.get(c, 0)) / M for c in after if after[c] - stats.get(c, 0) > 0}
    return {'enqueue': 1e6 * (enqueued - start) / M, 'process': 1e6 * (finished - enqueued) / M, 'by_command': by_command}


def main():
    with private_redis('bench-queue-', port=PORT):
        version = r.info('server')['redis_version']
        figures = bulk()
        print(f'redis-server {version}, private, no persistence; {ROUNDS} rounds in turns, medians')
        s_rate, s_mem = figures['sidekiq']
        for side in SIDES[1:]:
            e_rate, e_mem = figures[side]
            name = 'Entitle (before)' if side == 'before' else 'Entitle'
            print(f'bulk enqueue of {N:,} no-op jobs: Sidekiq push_bulk {s_rate:,.0f} jobs/s, {name} {e_rate:,.0f} jobs/s '
                  f'({e_rate / s_rate:.2f}x)')
            print(f'Redis memory per pending job: Sidekiq {s_mem:,.0f} B, {name} {e_mem:,.0f} B')
        life = {side: [] for side in SIDES}
        for _ in range(ROUNDS):
            for side in SIDES:
                life[side].append(lifecycle(side))
        for side, runs in life.items():
            enq = statistics.median(x['enqueue'] for x in runs)
            proc = statistics.median(x['process'] for x in runs)
            print(f'Redis CPU per job lifecycle over {M:,} no-op jobs, {side}: {enq + proc:.1f} us '
                  f'(enqueue {enq:.1f}, run and acknowledge {proc:.1f})')
            commands = runs[len(runs) // 2]['by_command']
            top = sorted(commands.items(), key=lambda kv: -kv[1])[:10]
            print('  the run step by command (us/job, inside scripts too): ' + ', '.join(f'{c} {v:.2f}' for c, v in top))


if __name__ == '__main__':
    main()
