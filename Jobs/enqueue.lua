-- Every job of the call is checked before anything is written: a refused call queues nothing.
local function refuse(job, rule)
  if job then return redis.error_reply('ERR enqueue job ' .. job .. ': ' .. rule) end
  return redis.error_reply('ERR enqueue: ' .. rule)
end
local NAME, QUEUE, DIGITS = '^[A-Za-z0-9_.:%-]+$', '^[A-Za-z0-9_.%-]+$', '^%d+$'
local function ms(value) return #value <= 15 and string.find(value, DIGITS) end
local function put(record, field, value)
  record[#record + 1] = field
  record[#record + 1] = value
end
local queue = ARGV[3]
if #KEYS < 4 or #KEYS % 4 ~= 0 then return refuse(nil, 'KEYS are pending, scheduled, stats, recent, then 4 per job') end
-- Nine values per job, or ten with a W3C traceparent (producers before it send nine).
local jobs = (#KEYS - 4) / 4
local per = 9
if jobs > 0 then per = (#ARGV - 4) / jobs elseif #ARGV ~= 4 then per = 0 end
if per ~= 9 and per ~= 10 then return refuse(nil, 'ARGV takes 4 values, then 9 or 10 per job (as many for each)') end
if not ms(ARGV[1]) then return refuse(nil, 'ARGV[1], now, must be ms since the epoch') end
if not (ms(ARGV[2]) and tonumber(ARGV[2]) > 0) then return refuse(nil, 'ARGV[2], the idempotency TTL, must be ms above 0') end
if #queue > 128 or not string.find(queue, QUEUE) then
  return refuse(nil, 'ARGV[3], the queue, must be 1 to 128 of A-Z a-z 0-9 - _ .')
end
if #ARGV[4] > 9 or not string.find(ARGV[4], DIGITS) then return refuse(nil, 'ARGV[4], the recent cap, must be a count') end
local tail = ':{' .. queue .. '}:pending'
if string.sub(KEYS[1], -#tail) ~= tail then return refuse(nil, 'KEYS[1] must be PREFIX:{' .. queue .. '}:pending') end
local base = string.sub(KEYS[1], 1, -8)
if KEYS[2] ~= base .. 'scheduled' or KEYS[3] ~= base .. 'stats' or KEYS[4] ~= base .. 'recent' then
  return refuse(nil, 'KEYS[2], KEYS[3] and KEYS[4] must be ' .. base .. 'scheduled, stats and recent')
end
local jobBase, idemBase, uniqueBase = base .. 'job:', base .. 'idem:', base .. 'unique:'
local types, trace = {}, nil
-- A job's second to fourth keys: its idempotency key, unique key and holder, or its own key again.
local function keyFor(i, k, value, keyBase, what)
  if KEYS[k + 4 * i] == (value == '' and KEYS[1 + 4 * i] or keyBase .. value) then return nil end
  if value == '' then return refuse(i, 'KEYS[' .. (k + 4 * i) .. '] must be its job key again (no ' .. what .. ')') end
  return refuse(i, 'KEYS[' .. (k + 4 * i) .. '] must be ' .. keyBase .. ' and the ' .. what)
end
for i = 1, jobs do
  local a = 4 + (i - 1) * per
  local id, jtype, payload, maxAttempts, runAt = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local idem, unique, seen, label = ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
  if #id > 128 or not string.find(id, NAME) then return refuse(i, 'the id must be 1 to 128 of A-Z a-z 0-9 - _ . :') end
  if KEYS[1 + 4 * i] ~= jobBase .. id then return refuse(i, 'KEYS[' .. (1 + 4 * i) .. '] must be ' .. jobBase .. id) end
  -- A call's jobs are mostly of one type: each type is checked once.
  if not types[jtype] then
    if #jtype > 128 or not string.find(jtype, NAME) then
      return refuse(i, 'the type must be 1 to 128 of A-Z a-z 0-9 - _ . :')
    end
    types[jtype] = true
  end
  -- An empty object (a job with no input) needs no decoder.
  if payload ~= '{}' and not pcall(cjson.decode, payload) then return refuse(i, 'the payload must be JSON') end
  if maxAttempts ~= '0' and maxAttempts ~= '1000' and not string.find(maxAttempts, '^[1-9]%d?%d?$') then
    return refuse(i, 'maxAttempts must be 0 (the type decides) to 1000')
  end
  if runAt ~= '0' and not ms(runAt) then return refuse(i, 'the run-at time must be ms since the epoch (0 = now)') end
  if #idem > 256 then return refuse(i, 'the idempotency key must have at most 256 bytes') end
  if #unique > 256 then return refuse(i, 'the unique key must have at most 256 bytes') end
  if #seen > 128 or (seen ~= '' and not string.find(seen, NAME)) then return refuse(i, 'the holder must be an id or empty') end
  local wrong = keyFor(i, 2, idem, idemBase, 'idempotency key') or keyFor(i, 3, unique, uniqueBase, 'unique key')
    or keyFor(i, 4, seen, jobBase, 'holder')
  if wrong then return wrong end
  if #label > 512 then return refuse(i, 'the label must have at most 512 bytes') end
  local tp = per == 10 and ARGV[a + 10] or ''
  if tp ~= '' then
    local hex = '[0-9a-f]'
    trace = trace or ('^' .. hex .. hex .. '%-' .. string.rep(hex, 32) .. '%-' .. string.rep(hex, 16) .. '%-' .. hex .. hex)
    if #tp < 55 or #tp > 128 or not string.find(tp, trace) or (#tp > 55 and not string.find(tp, '^%-[0-9a-f%-]*$', 56)) then
      return refuse(i, 'the traceparent must be 00-<32 hex>-<16 hex>-<2 hex> (W3C), in lowercase')
    end
  end
end
local now = tonumber(ARGV[1])
local idemTTL = tonumber(ARGV[2])
local recentCap = tonumber(ARGV[4])
local out = {}
local counts = {}
-- The lists are pushed after every job's record is written, so nothing may fail
-- in between: a key of another type than the script reads or writes there is
-- refused first, or the call would end with records whose ids are in no list.
local function wrongType(job, k, kind)
  local found = redis.call('TYPE', KEYS[k]).ok
  if found == 'none' or found == kind then return nil end
  return refuse(job, 'KEYS[' .. k .. '] holds a ' .. found .. ', not a ' .. kind)
end
for k, kind in pairs({[1] = 'list', [2] = 'zset', [3] = 'hash', [4] = 'list'}) do
  local wrong = wrongType(nil, k, kind)
  if wrong then return wrong end
end
-- One EXISTS for the whole call: a call of new ids (nearly every call) asks none per job.
-- An id twice in the call, or one that exists, is asked job by job, in order.
local fresh = true
do
  local ids, jobKeys, own = {}, {}, {[2] = 'string', [3] = 'string', [4] = 'hash'}
  for i = 1, jobs do
    local id, jobKey = ARGV[4 + (i - 1) * per + 1], KEYS[1 + 4 * i]
    if ids[id] then fresh = false end
    ids[id] = true
    jobKeys[i] = jobKey
    -- A job's idempotency key, unique key and holder, where it names them.
    if KEYS[2 + 4 * i] ~= jobKey or KEYS[3 + 4 * i] ~= jobKey or KEYS[4 + 4 * i] ~= jobKey then
      for k, kind in pairs(own) do
        local wrong = KEYS[k + 4 * i] ~= jobKey and wrongType(i, k + 4 * i, kind)
        if wrong then return wrong end
      end
    end
  end
  for s = 1, fresh and jobs or 0, 1000 do
    if redis.call('EXISTS', unpack(jobKeys, s, math.min(s + 999, jobs))) ~= 0 then fresh = false end
  end
end
local pending, scheduled, recent = {}, {}, {}
for i = 1, jobs do
  local jobKey, idemKey, uniqueKey, holderKey = KEYS[1 + 4 * i], KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i]
  local a = 4 + (i - 1) * per
  local id, jtype, payload, maxAttempts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local runAt, idem, unique, seen, label = tonumber(ARGV[a + 5]), ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
  local traceparent = ''
  if per == 10 then traceparent = ARGV[a + 10] end
  local existing, holder, stale = false, false, false
  -- The same id again (a repeated call whose reply was lost) enqueues nothing twice.
  if not fresh and redis.call('EXISTS', jobKey) == 1 then existing = id end
  if not existing and idem ~= '' then existing = redis.call('GET', idemKey) end
  if not existing and unique ~= '' then
    -- Held while the holder is unfinished; a finished or expired holder lets go.
    local current = redis.call('GET', uniqueKey)
    if current and current ~= seen then
      stale = current
    elseif current then
      local status = redis.call('HGET', holderKey, 'status') or (redis.call('HEXISTS', holderKey, 'type') == 1 and 'queued')
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
    -- Times are stored as the digits the producer sent (checked above), not reformatted as Lua numbers.
    -- What the key or a default says is left out (format 3): the id, the queue, the status
    -- while queued, attempt 0, maxAttempts 0, no idempotency key, enqueuedAt equal to createdAt.
    local record = {'type', jtype, 'payload', payload, 'createdAt', ARGV[1]}
    if runAt > now then
      put(record, 'status', 'scheduled')
      put(record, 'enqueuedAt', ARGV[a + 5])
    end
    -- The job names its unique key, so that its end frees the key (the finish script).
    if unique ~= '' then put(record, 'unique', unique) end
    if tonumber(maxAttempts) ~= 0 then put(record, 'maxAttempts', maxAttempts) end
    if idem ~= '' then
      put(record, 'idempotencyKey', idem)
      put(record, 'digest', redis.sha1hex(payload))
    end
    if label ~= '' then put(record, 'label', label) end
    if traceparent ~= '' then put(record, 'traceparent', traceparent) end
    redis.call('HSET', jobKey, unpack(record))
    if runAt > now then
      scheduled[#scheduled + 1] = runAt
      scheduled[#scheduled + 1] = id
    else
      pending[#pending + 1] = id
    end
    recent[#recent + 1] = id
    counts[jtype] = (counts[jtype] or 0) + 1
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
-- LPUSH a b is LPUSH a, then LPUSH b: the lists end as if pushed job by job.
for s = 1, #pending, 1000 do redis.call('LPUSH', KEYS[1], unpack(pending, s, math.min(s + 999, #pending))) end
for s = 1, #scheduled, 1000 do redis.call('ZADD', KEYS[2], unpack(scheduled, s, math.min(s + 999, #scheduled))) end
if recentCap > 0 then
  -- Only the newest recentCap ids outlive the trim.
  for s = math.max(1, #recent - recentCap + 1), #recent, 1000 do
    redis.call('LPUSH', KEYS[4], unpack(recent, s, math.min(s + 999, #recent)))
  end
  redis.call('LTRIM', KEYS[4], 0, recentCap - 1)
end
for jtype, n in pairs(counts) do redis.call('HINCRBY', KEYS[3], 'enqueued:' .. jtype, n) end
return out