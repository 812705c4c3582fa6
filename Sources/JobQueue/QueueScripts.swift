import RedisClient

/// The Lua scripts of the queue contract. Each multi-key transition is one script, so a
/// crash between two steps is impossible. Keys that scripts derive from a job id
/// (`jobPrefix .. id`) share the queue's hash tag, hence its cluster slot.
///
/// `Jobs/README.md` documents `enqueue` for producers in other languages; keep the two in step.
public enum QueueScripts {
    /// Enqueues one or more jobs.
    ///
    /// KEYS: pending, scheduled, stats, recent, then per job: its hash key, its idempotency
    /// key and its unique key (the hash key again for either when the job has none).
    /// ARGV: nowMs, idempotencyTTLms, queue, recentCap (0 = keep no recent list), then per
    /// job seven values: id, type, payload, maxAttempts, runAtMs (0 = now), idempotencyKey
    /// ('' = none), uniqueKey ('' = none).
    /// Returns per job: an id and a code: 1 created (this job's id), 0 an idempotency key
    /// already named that job, 2 refused because the unique key is held by that unfinished job.
    public static let enqueue = RedisScript(
        name: "enqueue",
        source: """
            local now = tonumber(ARGV[1])
            local idemTTL = tonumber(ARGV[2])
            local queue = ARGV[3]
            local recentCap = tonumber(ARGV[4])
            local out = {}
            local counts = {}
            for i = 1, (#KEYS - 4) / 3 do
              local jobKey, idemKey, uniqueKey = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
              local a = 4 + (i - 1) * 7
              local id, jtype, payload, maxAttempts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
              local runAt, idem, unique = tonumber(ARGV[a + 5]), ARGV[a + 6], ARGV[a + 7]
              local existing, holder = false, false
              if idem ~= '' then existing = redis.call('GET', idemKey) end
              if not existing and unique ~= '' then
                -- Held while the holder is unfinished; a finished or expired holder lets go.
                local current = redis.call('GET', uniqueKey)
                if current then
                  local jobPrefix = string.sub(jobKey, 1, #jobKey - #id)
                  local status = redis.call('HGET', jobPrefix .. current, 'status')
                  if status and status ~= 'succeeded' and status ~= 'failed' then holder = current end
                end
              end
              if existing then
                out[#out + 1] = existing
                out[#out + 1] = 0
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
            """
    )

    /// Starts jobs: optionally moves up to `extra` more ids from pending into the consumer's
    /// active list, then gives each id in the active list that it names a lease.
    ///
    /// KEYS: pending, active:{W}, dead, stats.
    /// ARGV: nowMs, extra, lease token, jobPrefix, defaultMaxAttempts (for jobs enqueued
    /// with 0, in the lost-worker check only), deadTTLms, then ids already moved by BLMOVE.
    /// Returns per started job: id, type, payload, attempt, maxAttempts (as stored: 0 means
    /// the type's policy), enqueuedAt.
    /// Ids whose record is gone or finished are dropped; a job lost by crashed workers more
    /// often than it may run goes dead.
    public static let start = RedisScript(
        name: "start",
        source: """
            local now, extra, lease, jp = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
            local defaultMax, deadTTL = tonumber(ARGV[5]), ARGV[6]
            local ids = {}
            for i = 7, #ARGV do ids[#ids + 1] = ARGV[i] end
            for i = 1, extra do
              local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
              if not id then break end
              ids[#ids + 1] = id
            end
            local out = {}
            for _, id in ipairs(ids) do
              local key = jp .. id
              local f = redis.call('HMGET', key, 'type', 'payload', 'attempt', 'maxAttempts', 'enqueuedAt', 'status')
              if (not f[1]) or f[6] == 'succeeded' or f[6] == 'failed' then
                redis.call('LREM', KEYS[2], -1, id)
              else
                local attempt = tonumber(f[3]) + 1
                local max = tonumber(f[4])
                if max == 0 then max = defaultMax end
                if attempt > max then
                  redis.call('LREM', KEYS[2], -1, id)
                  redis.call('HSET', key, 'status', 'failed', 'finishedAt', now,
                    'lastError', 'out of attempts: its workers were lost')
                  redis.call('HDEL', key, 'lease')
                  redis.call('PEXPIRE', key, deadTTL)
                  redis.call('ZADD', KEYS[3], now, id)
                  redis.call('HINCRBY', KEYS[4], 'dead:' .. f[1], 1)
                else
                  redis.call('HSET', key, 'status', 'processing', 'attempt', attempt, 'startedAt', now, 'lease', lease)
                  out[#out + 1] = id
                  out[#out + 1] = f[1]
                  out[#out + 1] = f[2]
                  out[#out + 1] = attempt
                  out[#out + 1] = f[4]
                  out[#out + 1] = f[5]
                end
              end
            end
            return out
            """
    )

    /// Records how jobs ended, fenced by lease: a job whose lease is not the caller's, or
    /// that is no longer in the caller's active list (reaped), is left alone.
    ///
    /// KEYS: active:{W}, scheduled, dead, stats.
    /// ARGV: nowMs, resultTTLms, deadTTLms, jobPrefix, then per job six values: id, lease,
    /// type, outcome ('ok', 'retry', 'defer': retry with the attempt given back, or 'dead'),
    /// result JSON or error text, retryAtMs.
    /// Returns per job 1 (recorded) or 0 (fenced off).
    public static let finish = RedisScript(
        name: "finish",
        source: """
            local now, resultTTL, deadTTL, jp = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
            local out = {}
            local counts = {}
            for a = 5, #ARGV, 6 do
              local id, lease, jtype, outcome, data, retryAt = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
              local key = jp .. id
              local ok = 0
              if redis.call('HGET', key, 'lease') == lease and redis.call('LREM', KEYS[1], -1, id) == 1 then
                ok = 1
                local counter
                if outcome == 'ok' then
                  redis.call('HSET', key, 'status', 'succeeded', 'result', data, 'finishedAt', now)
                  redis.call('HDEL', key, 'lease', 'retryAt')
                  redis.call('PEXPIRE', key, resultTTL)
                  counter = 'succeeded:'
                elseif outcome == 'retry' then
                  redis.call('HSET', key, 'status', 'retrying', 'lastError', data, 'retryAt', retryAt)
                  redis.call('HDEL', key, 'lease')
                  redis.call('ZADD', KEYS[2], retryAt, id)
                  counter = 'retried:'
                elseif outcome == 'defer' then
                  redis.call('HSET', key, 'status', 'queued', 'lastError', data, 'retryAt', retryAt)
                  redis.call('HINCRBY', key, 'attempt', -1)
                  redis.call('HDEL', key, 'lease')
                  redis.call('ZADD', KEYS[2], retryAt, id)
                  counter = 'deferred:'
                else
                  redis.call('HSET', key, 'status', 'failed', 'lastError', data, 'finishedAt', now)
                  redis.call('HDEL', key, 'lease', 'retryAt')
                  redis.call('PEXPIRE', key, deadTTL)
                  redis.call('ZADD', KEYS[3], now, id)
                  counter = 'dead:'
                end
                counts[counter .. jtype] = (counts[counter .. jtype] or 0) + 1
              end
              out[#out + 1] = ok
            end
            for field, n in pairs(counts) do redis.call('HINCRBY', KEYS[4], field, n) end
            return out
            """
    )

    /// Moves due jobs from the scheduled set to pending.
    ///
    /// KEYS: scheduled, pending. ARGV: nowMs, limit. Returns how many moved.
    public static let promote = RedisScript(
        name: "promote",
        source: """
            local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
            if #ids == 0 then return 0 end
            redis.call('ZREM', KEYS[1], unpack(ids))
            redis.call('LPUSH', KEYS[2], unpack(ids))
            return #ids
            """
    )

    /// Puts every job in a consumer's active list back at the head of pending and forgets
    /// the consumer. Used by the reaper (a consumer whose heartbeat expired; the attempt
    /// counts, so a job that kills its workers cannot loop for ever) and on shutdown (the
    /// consumer's own jobs; the attempt is given back, since being interrupted is no failure).
    ///
    /// KEYS: consumers, active:{W}, pending, stats.
    /// ARGV: consumer, nowMs, onlyIfExpired (1/0), refundAttempt (1/0), jobPrefix.
    /// Returns how many jobs moved, or -1 when the consumer is alive.
    public static let release = RedisScript(
        name: "release",
        source: """
            local consumer, now, onlyIfExpired, refund, jp = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
            if onlyIfExpired == '1' then
              local deadline = redis.call('ZSCORE', KEYS[1], consumer)
              if deadline and tonumber(deadline) > now then return -1 end
            end
            local n = 0
            while true do
              local id = redis.call('LMOVE', KEYS[2], KEYS[3], 'RIGHT', 'RIGHT')
              if not id then break end
              n = n + 1
              local key = jp .. id
              if redis.call('EXISTS', key) == 1 then
                redis.call('HSET', key, 'status', 'queued')
                redis.call('HDEL', key, 'lease')
                if refund == '1' and tonumber(redis.call('HGET', key, 'attempt') or '0') > 0 then
                  redis.call('HINCRBY', key, 'attempt', -1)
                end
              end
            end
            redis.call('ZREM', KEYS[1], consumer)
            if n > 0 and refund ~= '1' then redis.call('HINCRBY', KEYS[4], 'reaped', n) end
            return n
            """
    )

    /// Puts ids that a live consumer claimed without knowing it (the reply to BLMOVE or
    /// `start` was lost with its connection) back at the head of pending. An id already
    /// gone from the active list is left alone; a started job gets its attempt back.
    ///
    /// KEYS: active:{W}, pending. ARGV: jobPrefix, ids. Returns how many moved.
    public static let requeueOrphans = RedisScript(
        name: "requeueOrphans",
        source: """
            local n = 0
            for i = 2, #ARGV do
              local id = ARGV[i]
              if redis.call('LREM', KEYS[1], -1, id) == 1 then
                local key = ARGV[1] .. id
                if redis.call('HGET', key, 'status') == 'processing' then
                  redis.call('HINCRBY', key, 'attempt', -1)
                  redis.call('HSET', key, 'status', 'queued')
                  redis.call('HDEL', key, 'lease')
                end
                redis.call('RPUSH', KEYS[2], id)
                n = n + 1
              end
            end
            return n
            """
    )

    /// Sends dead jobs back to pending with their attempts reset.
    ///
    /// KEYS: dead, pending. ARGV: jobPrefix, ids. Returns how many were requeued.
    public static let retryDead = RedisScript(
        name: "retryDead",
        source: """
            local n = 0
            for i = 2, #ARGV do
              local id = ARGV[i]
              local key = ARGV[1] .. id
              if redis.call('ZREM', KEYS[1], id) == 1 and redis.call('EXISTS', key) == 1 then
                redis.call('PERSIST', key)
                redis.call('HSET', key, 'status', 'queued', 'attempt', 0)
                redis.call('HDEL', key, 'finishedAt', 'retryAt')
                redis.call('LPUSH', KEYS[2], id)
                n = n + 1
              end
            end
            return n
            """
    )

    /// Deletes dead jobs and their records.
    ///
    /// KEYS: dead. ARGV: jobPrefix, ids. Returns how many were removed.
    public static let purgeDead = RedisScript(
        name: "purgeDead",
        source: """
            local n = 0
            for i = 2, #ARGV do
              if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then n = n + 1 end
              redis.call('DEL', ARGV[1] .. ARGV[i])
            end
            return n
            """
    )

    /// Caps the dead set by count and age, deleting the records that drop out.
    ///
    /// KEYS: dead. ARGV: jobPrefix, maxCount, oldestAllowedMs. Returns how many were removed.
    public static let trimDead = RedisScript(
        name: "trimDead",
        source: """
            local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3], 'LIMIT', 0, 1000)
            local over = redis.call('ZCARD', KEYS[1]) - #old - tonumber(ARGV[2])
            if over > 0 then
              for _, id in ipairs(redis.call('ZRANGE', KEYS[1], #old, #old + math.min(over, 1000) - 1)) do old[#old + 1] = id end
            end
            for _, id in ipairs(old) do
              redis.call('ZREM', KEYS[1], id)
              redis.call('DEL', ARGV[1] .. id)
            end
            return #old
            """
    )

    /// An effect applied at most once per job id, counted: what `noop` does with `"effect"`.
    ///
    /// KEYS: effects hash, marker key. ARGV: marker TTL ms.
    /// Returns 1 when the effect happened now, 0 when it had already happened.
    public static let applyEffectOnce = RedisScript(
        name: "applyEffectOnce",
        source: """
            redis.call('HINCRBY', KEYS[1], 'runs', 1)
            if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then
              redis.call('HINCRBY', KEYS[1], 'applied', 1)
              return 1
            end
            return 0
            """
    )
}
