"""The benches' shared start: a release `entitle simulator` on a free port, and N purchases
bought from it (half consumables, half monthly subscriptions)."""
import concurrent.futures
import json
import subprocess
import urllib.request

PRODUCTS = ['com.entitle.demo.credits.100', 'com.entitle.demo.premium.monthly']


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def start(binary):
    """The simulator process and its URL."""
    sim = subprocess.Popen([binary, 'simulator', '--port', '0', '--log-level', 'error'], stdout=subprocess.PIPE, text=True)
    for line in sim.stdout:
        if 'listening on' in line:
            return sim, line.split()[-1]
    raise RuntimeError('the simulator did not start')


def buy(simulator, n, extra=None):
    """N purchases (their simulator answers: signedTransaction, transactionId, ...)."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda i: post(simulator + '/simulator/purchases',
                                            dict({'bundleId': 'com.entitle.demo', 'productId': PRODUCTS[i % 2]}, **(extra or {}))),
                             range(n)))


def development_secrets(token):
    """Every secret Config/catalog.development.json names, for an `entitle api` or worker of a
    bench (`token`: the demo publisher's secret key)."""
    return {'ENTITLE_DEMO_API_TOKEN': token, 'ENTITLE_DEMO_APP_KEY': 'bench-app-key-0123456789',
            'ENTITLE_DEMO_CLEENG_BASIC': 'bench:bench', 'ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET': 'bench-customer-token-secret-0123456789',
            'ENTITLE_DEMO_SHARED_SECRET': 'bench-shared-secret', 'ENTITLE_SOFTPHONE_API_TOKEN': 'bench-softphone-token-0123456789',
            'ENTITLE_SOFTPHONE_APP_KEY': 'bench-softphone-app-key-0123456789', 'ENTITLE_SOFTPHONE_SHARED_SECRET': 'bench-softphone-secret'}


def unlimited_catalog(root):
    """Config/catalog.development.json with the demo publisher's rate limit lifted, written to
    a temporary file: its path."""
    import os
    import tempfile
    catalog = json.load(open(os.path.join(root, 'Config', 'catalog.development.json')))
    catalog['publishers'][0]['api']['rateLimit'] = {'perSecond': 10_000_000, 'burst': 10_000_000}
    path = os.path.join(tempfile.mkdtemp(), 'catalog.json')
    json.dump(catalog, open(path, 'w'))
    return path
