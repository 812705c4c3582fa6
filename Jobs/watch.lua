local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'succeeded' and status ~= 'failed' then redis.call('HSET', KEYS[1], 'waiter', '1') end
return status