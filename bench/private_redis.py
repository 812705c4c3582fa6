"""A private redis-server for a bench: on a free loopback port (or the one given), no
persistence, in a directory of its own; waited for before use, stopped and removed after.

    with private_redis('entitle-markers-') as (r, port):
        ...
"""
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time

import redis


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis(prefix, port=None):
    port = port or free_port()
    directory = tempfile.mkdtemp(prefix=prefix)
    server = subprocess.Popen(
        ['redis-server', '--port', str(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', directory],
        stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(host='127.0.0.1', port=port)
        for _ in range(500):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if server.poll() is not None:
                    raise RuntimeError(f'redis-server on port {port} exited ({server.returncode})')
                time.sleep(0.01)
        yield r, port
    finally:
        # Nothing is saved (--save ''): SIGTERM stops it at once.
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
