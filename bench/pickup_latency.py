"""Idle pickup latency: time from a producer's enqueue call to the handler starting, with the
consumer idle (blocked in BLMOVE). Enqueues one job at a time the way another language would
(Jobs/enqueue.lua through redis-py), waits for it to finish, pauses, repeats.

Latency = the noop result's `startedUs` (the handler's first line, worker clock) minus the
producer's clock just before the enqueue call; both clocks are this machine's.
usage: python bench/pickup_latency.py [N]   (needs redis-py; starts its own redis-server and worker)
"""
import json
import os
import subprocess
import sys
import time
import uuid

from private_redis import private_redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN', os.path.join(ROOT, '.build', 'release', 'entitle'))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with private_redis('entitle-pickup-') as (r, port):
        run(n, r, port)


def run(n, r, port):
    url = f'redis://127.0.0.1:{port}'
    worker = subprocess.Popen([BIN, 'worker', '--queues', 'default=16', '--redis', url, '--log-level', 'warning'])
    try:
        while not r.zcard('entitle:{default}:consumers'):
            time.sleep(0.01)
        script = r.register_script(open(os.path.join(ROOT, 'Jobs', 'enqueue.lua')).read())
        q = 'default'
        base = [f'entitle:{{{q}}}:pending', f'entitle:{{{q}}}:scheduled', f'entitle:{{{q}}}:stats', f'entitle:{{{q}}}:recent']
        latencies = []
        for i in range(n + 50):
            job_id = uuid.uuid4().hex
            job_key = f'entitle:{{{q}}}:job:{job_id}'
            time.sleep(0.003)                      # the consumer is back in BLMOVE, idle
            t0 = time.time_ns() // 1000
            script(keys=base + [job_key, job_key, job_key, job_key], args=[t0 // 1000, 86_400_000, q, 200, job_id, 'noop', '{}', 0, 0, '', '', '', ''])
            while True:
                result = r.hget(job_key, 'result')
                if result:
                    break
                time.sleep(0.0002)
            if i >= 50:                            # the first runs warm up connections and caches
                latencies.append(json.loads(result)['startedUs'] - t0)
        ms = [v / 1000 for v in latencies]
        print(f'entitle pickup latency (idle consumer, enqueue call -> handler start), n={n}: '
              f'p50 {percentile(ms, 50):.3f} ms, p90 {percentile(ms, 90):.3f} ms, p99 {percentile(ms, 99):.3f} ms, max {max(ms):.3f} ms')
    finally:
        worker.terminate()
        worker.wait(timeout=30)


if __name__ == '__main__':
    main()
