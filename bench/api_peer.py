"""The peer for bench/api.sh: what a Python team would put in front of a Redis queue: a
Starlette app under uvicorn whose POST /v1/purchases checks the Bearer token and the JSON,
then enqueues an arq job (arq dedupes by job id, as Entitle does by idempotency key) and
answers 202 {"jobId"}. Run: uvicorn --workers 2 api_peer:app (PEER_REDIS_PORT, TOKEN)."""
import hashlib
import hmac
import json
import os

from arq import create_pool
from arq.connections import RedisSettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

TOKEN = hashlib.sha256(os.environ["TOKEN"].encode()).digest()
pool = None


async def startup():
    global pool
    pool = await create_pool(RedisSettings(port=int(os.environ["PEER_REDIS_PORT"])))


async def purchases(request):
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer ") or not hmac.compare_digest(hashlib.sha256(auth[7:].encode()).digest(), TOKEN):
        return JSONResponse({"error": "unauthorized", "message": "the token is not valid"}, status_code=401)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return JSONResponse({"error": "invalidRequest", "message": "the body is not a JSON object"}, status_code=400)
    if not isinstance(body, dict) or not isinstance(body.get("customer"), str) or not isinstance(body.get("transactionId"), str):
        return JSONResponse({"error": "invalidRequest", "message": "customer and transactionId are required"}, status_code=400)
    key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]
    job = await pool.enqueue_job("receipt", body, _job_id=key)
    return JSONResponse({"jobId": job.job_id if job else key}, status_code=202)


app = Starlette(routes=[Route("/v1/purchases", purchases, methods=["POST"])], on_startup=[startup])
