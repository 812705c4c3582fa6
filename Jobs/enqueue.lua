local now = tonumber(ARGV[1])
local idemTTL = tonumber(ARGV[2])
local queue = ARGV[3]
local out = {}
local counts = {}
for i = 1, (#KEYS - 3) / 2 do
  local jobKey, idemKey = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local a = 3 + (i - 1) * 6
  local id, jtype, payload, maxAttempts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local runAt, idem = tonumber(ARGV[a + 5]), ARGV[a + 6]
  local existing = false
  if idem ~= '' then
    existing = redis.call('GET', idemKey)
    if not existing then redis.call('SET', idemKey, id, 'PX', idemTTL) end
  end
  if existing then
    out[#out + 1] = existing
    out[#out + 1] = 0
  else
    local status, enqueuedAt = 'queued', now
    if runAt > now then status, enqueuedAt = 'scheduled', runAt end
    redis.call('HSET', jobKey, 'id', id, 'type', jtype, 'queue', queue, 'payload', payload,
      'status', status, 'attempt', 0, 'maxAttempts', maxAttempts, 'idempotencyKey', idem,
      'createdAt', now, 'enqueuedAt', enqueuedAt)
    if runAt > now then
      redis.call('ZADD', KEYS[2], runAt, id)
    else
      redis.call('LPUSH', KEYS[1], id)
    end
    counts[jtype] = (counts[jtype] or 0) + 1
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
for jtype, n in pairs(counts) do redis.call('HINCRBY', KEYS[3], 'enqueued:' .. jtype, n) end
return out