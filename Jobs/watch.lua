-- Every record has a type; a queued one of the third format has no status.
local f = redis.call('HMGET', KEYS[1], 'status', 'type')
if not f[2] then return nil end
local status = f[1] or 'queued'
if status ~= 'succeeded' and status ~= 'failed' then redis.call('HSET', KEYS[1], 'waiter', '1') end
return status