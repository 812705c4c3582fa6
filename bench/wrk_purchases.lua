-- wrk: POST /v1/purchases with a distinct customer and transaction id per request, so each
-- one is a new job (no idempotency hit). TOKEN comes from the environment.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
end

function request()
  counter = counter + 1
  local n = tid * 100000000 + counter
  local body = string.format('{"customer":"c%d@example.com","transactionId":"%d"}', n, 2000000000000000 + n)
  return wrk.format(nil, nil, nil, body)
end

local statuses = {}
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  io.write(string.format("RESULT {\"requests\": %d, \"seconds\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"errors\": %d, \"non2xx\": %d}\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.errors.status))
end
