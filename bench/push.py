"""Push: CUSTOMERS customers of the demo publisher (HOLDERS of them entitled to `premium`,
each with one APNs device) seeded through the real store by `push-bench`, which also
measures Redis bytes per device and the audience lookup; then one `POST /v1/pushes` to
everyone entitled to `premium`, through a release `entitle api` and one `entitle worker`
process, to the simulator's local APNs (HTTP/2, TLS): pushes/s from the POST to the last
accepted. In the same run, the peer: Python's httpx over HTTP/2 (h2) sending the same number
of pushes straight to the same local APNs with a JWT, at the same stream concurrency, with no
queue, no audience and no entitlement checks: the bare network cost, for the ratio.

Usage: bench/push.sh [CUSTOMERS] [HOLDERS]   (needs redis-server and ~/.peers-venv with
redis-py, httpx[http2], pyjwt, cryptography)
"""
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import httpx
import jwt
import redis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import simulator_purchases

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
BIN = os.environ.get('ENTITLE_BIN') or os.path.join(ROOT, '.build', 'release', 'entitle')
BENCH = os.path.join(ROOT, '.build', 'release', 'push-bench')
CUSTOMERS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
HOLDERS = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
PORT = 6395
PREFIX = 'bench-push'
TOKEN = 'demo-bench-token-0123456789'
# Streams in flight: the worker runs 8 batches at once, each 100 pushes at once.
WORKER_SLOTS = 8
STREAMS = WORKER_SLOTS * 100
r = redis.Redis(port=PORT)


def get(url, token=None, body=None):
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={'Content-Type': 'application/json', **({'Authorization': f'Bearer {token}'} if token else {})})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        return json.loads(body) if body else None


def free_port():
    import socket
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def peer(url, ca, n, streams):
    """httpx over HTTP/2: n pushes, `streams` at once, each with the same JWT (ES256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    get(SIMULATOR + '/simulator/apns/keys', body={'keyId': 'PEER000001', 'teamId': 'PEERTEAM01', 'publicKeyPEM': pem,
                                                  'topics': ['com.entitle.demo']})
    bearer = jwt.encode({'iss': 'PEERTEAM01', 'iat': int(time.time())}, key, algorithm='ES256', headers={'kid': 'PEER000001'})
    payload = json.dumps({'aps': {'alert': {'title': 'New issue', 'body': 'December is out'}}, 'issue': '2026-12'}).encode()
    headers = {'authorization': f'bearer {bearer}', 'apns-topic': 'com.entitle.demo', 'apns-push-type': 'alert', 'apns-priority': '10'}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(http2=True, verify=ca, limits=limits, timeout=60) as client:
        queue = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)
        ok = 0

        async def sender():
            nonlocal ok
            while not queue.empty():
                i = queue.get_nowait()
                response = await client.post(f'{url}/3/device/{i + 1:064x}', content=payload,
                                             headers={**headers, 'apns-id': str(uuid.uuid4())})
                ok += response.status_code == 200
        began = time.time()
        await asyncio.gather(*(sender() for _ in range(streams)))
        return ok, time.time() - began


def main():
    global SIMULATOR
    r.flushall()
    seeded = subprocess.run([BENCH, f'redis://127.0.0.1:{PORT}', PREFIX, str(CUSTOMERS), str(HOLDERS)], capture_output=True, text=True, check=True)
    seed = json.loads(seeded.stdout)
    sim, SIMULATOR = simulator_purchases.start(BIN)
    env = dict(os.environ, ENTITLE_ENV='development', ENTITLE_SIMULATOR_URL=SIMULATOR, ENTITLE_DEMO_API_TOKEN=TOKEN,
               ENTITLE_DEMO_CLEENG_BASIC='demo:bench-0123456789', ENTITLE_SOFTPHONE_API_TOKEN='softphone-bench-0123456789',
               ENTITLE_DEMO_APP_KEY='app-demo-bench-0123456789', ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET='bench-secret-0123456789',
               ENTITLE_SOFTPHONE_APP_KEY='app-softphone-bench-0123456789')
    api_port = free_port()
    api = subprocess.Popen([BIN, 'api', '--port', str(api_port), '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', PREFIX,
                            '--log-level', 'error'], env=env)
    worker = subprocess.Popen([BIN, 'worker', '--redis', f'redis://127.0.0.1:{PORT}', '--prefix', PREFIX, '--queues',
                               f'default={WORKER_SLOTS}', '--log-level', 'error', '--no-reports'], env=env)
    base = f'http://127.0.0.1:{api_port}'
    try:
        for _ in range(200):
            try:
                get(base + '/healthz')
                break
            except Exception:
                time.sleep(0.1)
        began = time.time()
        push = get(base + '/v1/pushes', TOKEN, {'bundleId': 'com.entitle.demo', 'audience': {'entitlement': 'premium'},
                                                'payload': {'aps': {'alert': {'title': 'New issue', 'body': 'December is out'}}, 'issue': '2026-12'}})
        while True:
            state = get(f'{base}/v1/pushes/{push["pushId"]}?limit=3', TOKEN)
            if state['status'] in ('finished', 'failed'):
                break
            time.sleep(0.05)
        seconds = time.time() - began
        stats = get(SIMULATOR + '/simulator/apns/stats')
        local = get(SIMULATOR + '/simulator/apns')
        ca = os.path.join(tempfile.mkdtemp(), 'ca.pem')
        open(ca, 'w').write(local['certificateAuthority'])
        ok, peer_seconds = asyncio.run(peer(local['url'], ca, HOLDERS, STREAMS))
        entitle_rate = stats['accepted'] / seconds
        peer_rate = ok / peer_seconds
        print(json.dumps({
            **seed, 'push': {'status': state['status'], 'counts': state['counts'], 'seconds': round(seconds, 2),
                               'reasons': sorted({d.get('reason', '') for d in state['devices']})},
            'accepted': stats['accepted'], 'pushesPerSecond': round(entitle_rate), 'streams': STREAMS,
            'peerPushesPerSecond': round(peer_rate), 'peerAccepted': ok, 'ratio': round(entitle_rate / peer_rate, 3),
        }, sort_keys=True))
    finally:
        for process in (api, worker, sim):
            process.terminate()
            process.wait()


if __name__ == '__main__':
    main()
