"""What a notification's "applied" marker costs in Redis at scale, the layout before and after
side by side (issue 33): N markers written with the commands each version sends, on one private
redis-server, in turns, `used_memory` after less before, over N.

- before: a key per notification, `PREFIX:ent:P:notification:ID` = "1", EX 30 days;
- after (`AppliedNotifications`): 22 hex digits of SHA-256(ID) in the set
  `PREFIX:ent:P:applied:{P/applied-B}:G` (B the digest's first two hex digits, G the five-day
  generation), SADD then PEXPIREAT at the generation's end plus 30 days plus B minutes (the
  `notification-applied` script).

Half the ids are V2 notificationUUIDs, half V1 body digests ("v1:" + 64 hex digits), as a
subscription purchase with notifications writes one of each.

Usage: ~/.peers-venv/bin/python bench/markers.py [N] [ROUNDS]   (needs redis-server)
"""
import hashlib
import sys
import time
import uuid

from private_redis import private_redis

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
PREFIX, PUBLISHER = 'entitle', 'demo'
DAY = 86_400_000
GENERATION, RETENTION = 5 * DAY, 30 * DAY


def ids(n):
    for i in range(n):
        yield str(uuid.uuid4()) if i % 2 == 0 else 'v1:' + hashlib.sha256(str(i).encode()).hexdigest()


def before(r, batch):
    pipe = r.pipeline(transaction=False)
    for id in batch:
        pipe.set(f'{PREFIX}:ent:{PUBLISHER}:notification:{id}', '1', ex=30 * 86_400)
    pipe.execute()


def after(r, batch):
    now = int(time.time() * 1000)
    generation = now // GENERATION
    expires = (generation + 1) * GENERATION + RETENTION
    pipe = r.pipeline(transaction=False)
    for id in batch:
        digest = hashlib.sha256(id.encode()).hexdigest()[:24]
        key = f'{PREFIX}:ent:{PUBLISHER}:applied:{{{PUBLISHER}/applied-{digest[:2]}}}:{generation}'
        pipe.sadd(key, digest[-22:])
        pipe.pexpireat(key, expires + int(digest[:2], 16) * 60_000)
    pipe.execute()


def measure(r, write):
    r.flushall()
    time.sleep(0.2)
    start = r.info('memory')['used_memory']
    batch = []
    for id in ids(N):
        batch.append(id)
        if len(batch) == 10_000:
            write(r, batch)
            batch = []
    if batch:
        write(r, batch)
    return (r.info('memory')['used_memory'] - start) / N, r.dbsize()


def main():
    with private_redis('entitle-markers-') as (r, _):
        print(f'redis-server {r.info("server")["redis_version"]}, {N:,} markers, {ROUNDS} rounds in turns')
        results = {'before': [], 'after': []}
        for _ in range(ROUNDS):
            for name, write in (('before', before), ('after', after)):
                per, keys = measure(r, write)
                results[name].append(per)
                print(f'  {name:>6}: {per:,.1f} B per marker ({keys:,} keys)', flush=True)
        b, a = min(results['before']), min(results['after'])
        print(f'per marker: before {b:,.1f} B, after {a:,.1f} B, after/before {a / b:.3f}')


main()
