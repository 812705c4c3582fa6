#!/usr/bin/env bash
# Signed-transaction verification, Entitle vs Apple's Python library (app-store-server-library),
# same inputs (real Apple-signed sandbox transactions), same run, alternating, single thread each.
# Usage: bench/verify.sh [ROUNDS] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ITERATIONS=${2:-20000}
VENV=${VERIFY_PEER_VENV:-$HOME/.asl-venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q app-store-server-library
fi
swift build -c release --product verify-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)/verify-bench
V=Tests/Vectors
FILES=("$V/signed-data/gopay-real-transaction-sandbox-2022-10-voicerecording-with-appAccountToken.jws"
       "$V/signed-data/gopay-real-transaction-sandbox-2022-11-voicerecording-renewal.jws")
BUNDLE=Com.VoiceRecording.Telephone
PY_ITERATIONS=$((ITERATIONS / 10))
for round in $(seq "$ROUNDS"); do
    e=$("$BIN" "$ITERATIONS" "$BUNDLE" "${FILES[@]}")
    c=$(VERIFY_BENCH_COLD=1 "$BIN" "$PY_ITERATIONS" "$BUNDLE" "${FILES[@]}")
    p=$("$VENV/bin/python" bench/verify_peer.py "$PY_ITERATIONS" "$BUNDLE" "$V/certs/AppleRootCA-G3.cer" "${FILES[@]}")
    # OpenSSL's raw P-256 verify on this core, in the same round: the ceiling for one ES256 check.
    o=$(openssl speed -seconds 3 ecdsap256 2>/dev/null | awk '/nistp256/ {print $NF}')
    echo "$e"; echo "$c"; echo "$p"
    python3 - "$e" "$c" "$p" "$o" <<'PY'
import json, sys
e, c, p = (json.loads(x) for x in sys.argv[1:4])
o = float(sys.argv[4])
print(f"round: entitle {e['per_cpu_s']:.0f}/cpu-s, entitle without chain cache {c['per_cpu_s']:.0f}/cpu-s, "
      f"apple-python {p['per_cpu_s']:.0f}/cpu-s -> {e['per_cpu_s'] / p['per_cpu_s']:.1f}x (cached), "
      f"{c['per_cpu_s'] / p['per_cpu_s']:.1f}x (uncached); openssl speed ecdsap256 verify {o:.0f}/s -> "
      f"entitle at {e['per_cpu_s'] / o:.2f} of it")
PY
done
