"""Entitle peer for ../shared/bench/peers/harness.py: `entitle worker` processes on the same Redis.

Crash-safe fetch as always (BLMOVE into a per-consumer active list, leases, batched acks).
The binary is this checkout's release build: `swift build -c release --product entitle`.
"""
import os
import re
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
BIN = os.environ.get('ENTITLE_BIN', os.path.join(ROOT, '.build', 'release', 'entitle'))
PORT = int(os.environ.get('BENCH_REDIS_PORT', '6390'))
URL = f'redis://127.0.0.1:{PORT}'
CONC = int(os.environ.get('ENTITLE_BENCH_CONCURRENCY', '64'))
MODES = {
    'noop': dict(n=20000, procs=2, conc=CONC, payload='{}'),
    'noop-1proc': dict(n=20000, procs=1, conc=CONC, payload='{}'),
    'sleep10': dict(n=5000, procs=2, conc=25, payload='{"sleepMs":10}'),
}
VERSION = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip() or 'dev'
STATS = 'entitle:{default}:stats'


def enqueue(mode, n):
    m = MODES[mode]
    out = subprocess.run([BIN, 'enqueue', 'noop', '--payload', m['payload'], '--count', str(n), '--quiet', '--redis', URL],
                         capture_output=True, text=True, check=True)
    return float(re.search(r'in ([0-9.]+) s', out.stderr).group(1))   # the bulk enqueue itself


def worker_cmds(mode):
    m = MODES[mode]
    cmd = [BIN, 'worker', '--queues', f"default={m['conc']}", '--redis', URL, '--log-level', 'warning']
    return [cmd] * m['procs'], f"{m['procs']}procs,concurrency={m['conc']},crash-safe(BLMOVE+lease+batched-ack)"


def pending(r):
    """Jobs not yet recorded as succeeded (pending, claimed or running)."""
    enqueued = int(r.hget(STATS, 'enqueued:noop') or 0)
    return enqueued - int(r.hget(STATS, 'succeeded:noop') or 0)


def verify(r, n):
    done = int(r.hget(STATS, 'succeeded:noop') or 0)
    retried = int(r.hget(STATS, 'retried:noop') or 0)
    dead = r.zcard('entitle:{default}:dead')
    left = r.llen('entitle:{default}:pending')
    if left or retried or dead or done != n:
        return f'succeeded={done},left={left},retried={retried},dead={dead}'
    return 'ok'
