local now = tonumber(ARGV[1])
local idemTTL = tonumber(ARGV[2])
local queue = ARGV[3]
local recentCap = tonumber(ARGV[4])
local out = {}
local counts = {}
-- Nine values per job, or ten with a W3C traceparent (producers before it send nine).
local jobs = (#KEYS - 4) / 4
local per = 9
if jobs > 0 then per = (#ARGV - 4) / jobs end
if per ~= 9 and per ~= 10 then return redis.error_reply('ERR enqueue takes 9 or 10 values per job') end
for i = 1, jobs do
  local jobKey, idemKey, uniqueKey, holderKey = KEYS[1 + 4 * i], KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i]
  local a = 4 + (i - 1) * per
  local id, jtype, payload, maxAttempts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local runAt, idem, unique, seen, label = tonumber(ARGV[a + 5]), ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
  local traceparent = ''
  if per == 10 then traceparent = ARGV[a + 10] end
  local existing, holder, stale = false, false, false
  -- The same id again (a repeated call whose reply was lost) enqueues nothing twice.
  if redis.call('EXISTS', jobKey) == 1 then existing = id end
  if not existing and idem ~= '' then existing = redis.call('GET', idemKey) end
  if not existing and unique ~= '' then
    -- Held while the holder is unfinished; a finished or expired holder lets go.
    local current = redis.call('GET', uniqueKey)
    if current and current ~= seen then
      stale = current
    elseif current then
      local status = redis.call('HGET', holderKey, 'status')
      if status and status ~= 'succeeded' and status ~= 'failed' then holder = current end
    end
  end
  if existing then
    out[#out + 1] = existing
    out[#out + 1] = 0
  elseif stale then
    out[#out + 1] = stale
    out[#out + 1] = 3
  elseif holder then
    out[#out + 1] = holder
    out[#out + 1] = 2
  else
    if idem ~= '' then redis.call('SET', idemKey, id, 'PX', idemTTL) end
    if unique ~= '' then redis.call('SET', uniqueKey, id, 'PX', idemTTL) end
    local status, enqueuedAt = 'queued', now
    if runAt > now then status, enqueuedAt = 'scheduled', runAt end
    redis.call('HSET', jobKey, 'id', id, 'type', jtype, 'queue', queue, 'payload', payload,
      'status', status, 'attempt', 0, 'maxAttempts', maxAttempts, 'idempotencyKey', idem,
      'createdAt', now, 'enqueuedAt', enqueuedAt)
    if idem ~= '' then redis.call('HSET', jobKey, 'digest', redis.sha1hex(payload)) end
    if label ~= '' then redis.call('HSET', jobKey, 'label', label) end
    if traceparent ~= '' then redis.call('HSET', jobKey, 'traceparent', traceparent) end
    if runAt > now then
      redis.call('ZADD', KEYS[2], runAt, id)
    else
      redis.call('LPUSH', KEYS[1], id)
    end
    if recentCap > 0 then redis.call('LPUSH', KEYS[4], id) end
    counts[jtype] = (counts[jtype] or 0) + 1
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
if recentCap > 0 then redis.call('LTRIM', KEYS[4], 0, recentCap - 1) end
for jtype, n in pairs(counts) do redis.call('HINCRBY', KEYS[3], 'enqueued:' .. jtype, n) end
return out
