"""What issue 31's remaining targets stand against on this machine: the Redis CPU that a job's
own record costs with no script at all, and how long a producer's call takes after the server
sat idle. Each figure is a floor for the queue's: nothing Entitle runs can be cheaper than the
commands it must send, or answer before the producer's own call returns.

1. Redis CPU per job lifecycle, by raw commands from redis-py in pipelines (no Lua, no checks):
   the record's commands (HSET of a new hash and LPUSH; LMOVE; HMGET and HSET; HSET, HDEL,
   LREM, PEXPIRE and HINCRBY), 64 jobs at a time through claim, start and finish, over N jobs;
   beside it Sidekiq's (LPUSH of serialized jobs 500 at a time, one RPOP each).
2. Round trips after 3 ms idle, over M turns: a PING, a PING right after it, the enqueue script
   (Jobs/enqueue.lua) with no worker.

usage: python bench/queue_floors.py [N] [M]   (needs redis-py; starts its own redis-server)
"""
import os
import sys
import time

from private_redis import private_redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def cpu(r):
    info = r.info('cpu')
    return info['used_cpu_user'] + info['used_cpu_sys']


def lifecycle(r, n):
    ids = [os.urandom(11).hex() for _ in range(n)]
    now = str(int(time.time() * 1000))
    job = 'floor:{default}:job:'
    pending, active, stats = 'floor:{default}:pending', 'floor:{default}:active:w', 'floor:{default}:stats'
    before = cpu(r)
    for i in range(0, n, 500):
        p = r.pipeline(transaction=False)
        for j in ids[i:i + 500]:
            p.hset(job + j, mapping={'type': 'noop', 'payload': '{}', 'createdAt': now})
            p.lpush(pending, j)
        p.execute()
    enqueue = (cpu(r) - before) / n * 1e6
    before = cpu(r)
    for i in range(0, n, 64):
        batch = ids[i:i + 64]
        p = r.pipeline(transaction=False)
        for j in batch:
            p.lmove(pending, active, 'RIGHT', 'LEFT')
        for j in batch:
            p.hmget(job + j, 'type', 'payload', 'attempt')
            p.hset(job + j, mapping={'status': 'processing', 'attempt': '1', 'startedAt': now, 'lease': 'w:1'})
        p.execute()
        p = r.pipeline(transaction=False)
        for j in batch:
            p.hset(job + j, mapping={'status': 'succeeded', 'finishedAt': now, 'result': '{}'})
            p.hdel(job + j, 'lease')
            p.lrem(active, 1, j)
            p.pexpire(job + j, 86_400_000)
            p.hincrby(stats, 'succeeded:noop', 1)
        p.execute()
    run = (cpu(r) - before) / n * 1e6
    before = cpu(r)
    for i in range(0, n, 500):
        r.lpush('floor:sidekiq', *[
            '{"class":"NoopJob","args":[],"jid":"%s","created_at":1764240000.0,"enqueued_at":1764240000.0,'
            '"retry":true,"queue":"default"}' % j for j in ids[i:i + 500]])
    push = (cpu(r) - before) / n * 1e6
    before = cpu(r)
    for i in range(0, n, 500):
        p = r.pipeline(transaction=False)
        for _ in ids[i:i + 500]:
            p.rpop('floor:sidekiq')
        p.execute()
    pop = (cpu(r) - before) / n * 1e6
    r.flushall()
    return enqueue, run, push, pop


def idle_calls(r, m):
    script = r.register_script(open(os.path.join(ROOT, 'Jobs', 'enqueue.lua')).read())
    q = 'default'
    base = [f'floor:{{{q}}}:pending', f'floor:{{{q}}}:scheduled', f'floor:{{{q}}}:stats', f'floor:{{{q}}}:recent']
    first, second, enqueue = [], [], []
    for i in range(m + 50):
        time.sleep(0.003)
        t0 = time.perf_counter()
        r.ping()
        t1 = time.perf_counter()
        r.ping()
        t2 = time.perf_counter()
        time.sleep(0.003)
        job_id = os.urandom(11).hex()
        key = f'floor:{{{q}}}:job:{job_id}'
        t3 = time.perf_counter()
        script(keys=base + [key] * 4, args=[int(time.time() * 1000), 86_400_000, q, 200, job_id, 'noop', '{}', 0, 0, '', '', '', ''])
        t4 = time.perf_counter()
        if i >= 50:
            first.append((t1 - t0) * 1000)
            second.append((t2 - t1) * 1000)
            enqueue.append((t4 - t3) * 1000)
    r.flushall()
    return first, second, enqueue


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    with private_redis('entitle-floors-') as (r, _):
        enqueue, run, push, pop = lifecycle(r, n)
        print(f'Redis CPU per job, raw commands in pipelines (no Lua), N={n}: the record: enqueue {enqueue:.2f} us, '
              f'claim + start + finish {run:.2f} us, lifecycle {enqueue + run:.2f} us; Sidekiq\'s: push {push:.2f} us, pop {pop:.2f} us')
        first, second, enqueue_calls = idle_calls(r, m)
        def line(values):
            return f'p50 {percentile(values, 50):.3f} ms, p90 {percentile(values, 90):.3f} ms, p99 {percentile(values, 99):.3f} ms'
        print(f'after 3 ms idle, M={m}: PING {line(first)}; a second PING at once {line(second)}; '
              f'the enqueue script, no worker {line(enqueue_calls)}')


if __name__ == '__main__':
    main()
