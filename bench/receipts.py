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


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc)."""
    fields = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def redis_cpu():
    info = r.info('cpu')
    return info['used_cpu_user'] + info['used_cpu_sys']


def run_workers(prefix, procs, job_type, n, simulator, metrics_base, sim_pid=None):
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=simulator)
    r.config_resetstat()
    redis_before = redis_cpu()
    sim_before = cpu_seconds(sim_pid) if sim_pid else 0
    machine_before = sum(float(x) for x in open('/proc/stat').readline().split()[1:8]) / os.sysconf('SC_CLK_TCK')
    workers = [subprocess.Popen([BIN, 'worker', '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', prefix, '--queues', 'default=32',
                                 '--log-level', 'error', '--metrics-port', str(metrics_base + i)] + EXTRA_WORKER_ARGS, env=env)
               for i in range(procs)]
    stats = f'{prefix}:{{default}}:stats'
    deadline = time.time() + 600
    while int(r.hget(stats, f'succeeded:{job_type}') or 0) + int(r.hget(stats, f'dead:{job_type}') or 0) < n and time.time() < deadline:
        time.sleep(0.05)
    split = {}
    worker_cpu = 0.0
    for i in range(procs):
        text = urllib.request.urlopen(f'http://127.0.0.1:{metrics_base + i}/metrics', timeout=10).read().decode()
        for phase, value in re.findall(r'entitle_receipt_phase_seconds_sum\{phase="(\w+)"\} ([0-9.e+-]+)', text):
            split[phase] = split.get(phase, 0) + float(value)
        for name in ('entitle_redis_round_trips_total', 'entitle_redis_commands_total'):
            for value in re.findall(name + r'(?:\{\})? ([0-9.e+-]+)', text):
                split[name] = split.get(name, 0) + float(value)
        worker_cpu += cpu_seconds(workers[i].pid)
    commandstats = r.info('commandstats')
    split['redis_calls'] = sum(v['calls'] for k, v in commandstats.items() if k not in ('cmdstat_info', 'cmdstat_config'))
    split['redis_calls_by_command'] = {k[len('cmdstat_'):]: v['calls'] for k, v in commandstats.items()
                                       if k not in ('cmdstat_info', 'cmdstat_config')}
    split['redis_cpu_s'] = redis_cpu() - redis_before
    split['worker_cpu_s'] = worker_cpu
    if sim_pid:
        split['simulator_cpu_s'] = cpu_seconds(sim_pid) - sim_before
    split['machine_cpu_s'] = sum(float(x) for x in open('/proc/stat').readline().split()[1:8]) / os.sysconf('SC_CLK_TCK') - machine_before
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
        rate, failed, split = run_workers(prefix, procs, 'receipt', N, simulator, 9300 + procs * 10, sim.pid)
        noop_prefix = f'bench-noop-{procs}'
        enqueue(noop_prefix, [('noop', {})] * N)
        noop_rate, _, noop_split = run_workers(noop_prefix, procs, 'noop', N, simulator, 9400 + procs * 10)
        rows.append((procs, rate, failed, split, noop_rate, noop_split))
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
         'split_seconds': {k: round(v, 2) if isinstance(v, float) else v for k, v in split.items()},
         'noop': {k: round(v, 2) if isinstance(v, float) else v for k, v in noop_split.items()}}
        for p, rate, failed, split, noop, noop_split in rows],
        'apple_python_verifications_per_cpu_s': peer and round(peer)}))
    for p, rate, failed, split, noop, noop_split in rows:
        total = split.get('total', 0) or 1
        parts = ', '.join(f"{k} {100 * split.get(k, 0) / total:.0f}%" for k in ('verify', 'apple', 'store'))
        rest = 100 * (total - sum(split.get(k, 0) for k in ('verify', 'apple', 'store'))) / total
        print(f'{p} process(es): {rate:,.0f} receipt jobs/s ({failed} failed), {noop:,.0f} no-op jobs/s in the same run '
              f'-> a receipt job costs {noop / rate:.1f} no-op jobs; time in handlers: {parts}, rest {rest:.0f}%')
        trips = split.get('entitle_redis_round_trips_total', 0) / N
        noop_trips = noop_split.get('entitle_redis_round_trips_total', 0) / N
        print(f'   Redis per receipt job: {trips:.1f} round trips from the workers ({noop_trips:.2f} per no-op job), '
              f'{split["redis_calls"] / N:.1f} commands run by the server (inside scripts too), '
              f'{1e6 * split["redis_cpu_s"] / N:.0f} us of redis-server CPU')
        print(f'   CPU per receipt job: workers {1e6 * split["worker_cpu_s"] / N:.0f} us, simulator '
              f'{1e6 * split.get("simulator_cpu_s", 0) / N:.0f} us, redis {1e6 * split["redis_cpu_s"] / N:.0f} us; '
              f'the simulator used {100 * split.get("simulator_cpu_s", 0) / max(split["machine_cpu_s"], 1e-9):.0f}% '
              f'of the machine\'s CPU time in the run; no-op job: workers {1e6 * noop_split["worker_cpu_s"] / N:.0f} us')
        if peer:
            print(f'   vs Apple\'s Python library verifying alone: {peer:,.0f}/cpu-s -> whole jobs at {rate / peer:.1f}x its bare verification rate')


if __name__ == '__main__':
    main()
