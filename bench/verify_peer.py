"""Apple's own Python library (PyPI app-store-server-library) verifying the same signed
transactions as bench/VerifyBenchmark, single thread. Prints one JSON line.

Usage: python verify_peer.py ITERATIONS BUNDLE_ID ROOT_CER FILE...
"""
import json
import sys
import time

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier


def main():
    iterations = int(sys.argv[1])
    bundle_id = sys.argv[2]
    root = open(sys.argv[3], "rb").read()
    inputs = [open(path).read().strip() for path in sys.argv[4:]]
    # Offline checks: the chain is checked at each payload's signedDate (the real leaf expired in 2023).
    verifier = SignedDataVerifier([root], False, Environment.SANDBOX, bundle_id)
    for jws in inputs:
        verifier.verify_and_decode_signed_transaction(jws)
    wall_start = time.perf_counter()
    cpu_start = time.process_time()
    checksum = 0
    for index in range(iterations):
        transaction = verifier.verify_and_decode_signed_transaction(inputs[index % len(inputs)])
        checksum += len(transaction.transactionId or "")
    cpu = time.process_time() - cpu_start
    wall = time.perf_counter() - wall_start
    print(json.dumps({"impl": "apple-python", "verifications": iterations, "wall_s": wall, "cpu_s": cpu,
                      "per_cpu_s": iterations / cpu, "checksum": checksum}))


if __name__ == "__main__":
    main()
