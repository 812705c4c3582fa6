"""What bench/api.py and bench/api_checks.py share: waiting for a server, and wrk's
POST /v1/purchases load (bench/wrk_purchases.lua) read back as one result."""
import json
import os
import subprocess
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))


def wait_http(url, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f'{url} did not answer')


def wrk_purchases(url, seconds, connections, token):
    """wrk -t2 for `seconds` against `url`; the lua script's RESULT line plus `per_s`."""
    out = subprocess.run(['wrk', '-t2', f'-c{connections}', f'-d{seconds}s', '--latency', '-s',
                          os.path.join(ROOT, 'bench', 'wrk_purchases.lua'), url],
                         capture_output=True, text=True, env=dict(os.environ, TOKEN=token))
    line = next((l for l in out.stdout.splitlines() if l.startswith('RESULT ')), None)
    if not line:
        raise SystemExit(out.stdout + out.stderr)
    result = json.loads(line[7:])
    result['per_s'] = result['requests'] / result['seconds']
    return result
