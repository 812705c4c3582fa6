"""The enqueue script's own cost: two versions of `Jobs/enqueue.lua` side by side on one Redis.

Usage: python bench/enqueue_script.py OLD.lua NEW.lua [JOBS] [ROUNDS]
(for example `git show main:Jobs/enqueue.lua > /tmp/old.lua`). Needs redis-py and redis-server.

Starts a private redis-server (no persistence), then in each round runs every script on every
workload, taking turns: FLUSHALL, then JOBS jobs (100,000) in calls of 500 jobs, all calls of a
round sent in one pipeline, as `entitle enqueue --count` sends them. Arguments are built before
the clock starts. Prints per script and workload the median over rounds of jobs/s (wall, client
included) and of the redis-server's CPU per job (its `used_cpu_user` + `used_cpu_sys`), which is
what the script itself costs.
"""
import statistics
import sys
import time
import uuid

from private_redis import private_redis

CHUNK = 500
TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
# A receipt job's payload is about 2 KB of JSON (a signed transaction); noop's is `{}`.
RECEIPT = '{"publisher":"demo","customer":"ann@example.com","signedTransaction":"' + 'eyJhbGciOiJFUzI1NiJ9' * 100 + '"}'
WORKLOADS = {
    'noop {}': lambda i, job_id: ('noop', '{}', '', ''),
    'receipt 2 KB, idempotency key, label, traceparent': lambda i, job_id: ('receipt', RECEIPT, f'order-{job_id}', '{"publisher":"demo"}'),
}


def calls(workload, jobs, prefix='bench', queue='default'):
    base = f'{prefix}:{{{queue}}}:'
    out = []
    now = int(time.time() * 1000)
    for start in range(0, jobs, CHUNK):
        keys = [base + 'pending', base + 'scheduled', base + 'stats', base + 'recent']
        args = [now, 86_400_000, queue, 200]
        for i in range(start, min(jobs, start + CHUNK)):
            job_id = uuid.uuid4().hex
            job_key = base + 'job:' + job_id
            jtype, payload, idem, label = WORKLOADS[workload](i, job_id)
            keys += [job_key, base + 'idem:' + idem if idem else job_key, job_key, job_key]
            args += [job_id, jtype, payload, 0, 0, idem, '', '', label, TRACEPARENT if idem else '']
        out.append((keys, args))
    return out


def redis_cpu(r):
    info = r.info('cpu')
    return info['used_cpu_user'] + info['used_cpu_sys']


def main():
    old, new = sys.argv[1], sys.argv[2]
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    scripts = {'old': open(old).read(), 'new': open(new).read()}
    with private_redis('entitle-enqueue-') as (r, _):
        shas = {name: r.script_load(source) for name, source in scripts.items()}
        results = {(name, workload): ([], []) for name in scripts for workload in WORKLOADS}
        for _ in range(rounds):
            for workload in WORKLOADS:
                prepared = calls(workload, jobs)
                for name in scripts:
                    r.flushall()
                    pipe = r.pipeline(transaction=False)
                    for keys, args in prepared:
                        pipe.evalsha(shas[name], len(keys), *keys, *args)
                    cpu = redis_cpu(r)
                    began = time.perf_counter()
                    replies = pipe.execute()
                    wall = time.perf_counter() - began
                    cpu = redis_cpu(r) - cpu
                    assert all(len(reply) == 2 * min(CHUNK, jobs) for reply in replies[:-1]), replies[0][:4]
                    assert r.llen('bench:{default}:pending') == jobs
                    results[(name, workload)][0].append(jobs / wall)
                    results[(name, workload)][1].append(cpu / jobs * 1e6)
        print(f'{jobs} jobs per run, {rounds} rounds, calls of {CHUNK}; medians (min-max)')
        for workload in WORKLOADS:
            for name in scripts:
                rate, cpu = results[(name, workload)]
                print(f'{workload:52} {name}: {statistics.median(rate):9,.0f} jobs/s ({min(rate):,.0f}-{max(rate):,.0f}), '
                      f'redis {statistics.median(cpu):5.2f} us/job ({min(cpu):.2f}-{max(cpu):.2f})')


if __name__ == '__main__':
    main()
