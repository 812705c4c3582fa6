import RedisClient

/// The Lua scripts of the queue contract. Each multi-key transition is one script, so a
/// crash between two steps is impossible. Every key a script touches is in its KEYS (but
/// `startClaimed`'s job key: where it is refused, the worker starts the job with `start`;
/// and the unique key a job names, which `finish`, `retryDead` and a start that finds a job
/// out of attempts free or take under `pcall`: where it is refused, the key expires with its
/// TTL), and all of a call's keys carry the queue's hash tag (one cluster slot), so the scripts
/// are correct on Redis Cluster and behind proxies that check declared keys. Where a script
/// would have to discover ids (claiming, reaping, trimming), the caller reads them first
/// and the script checks they are still where the caller saw them.
///
/// `Jobs/README.md` documents `enqueue` for producers in other languages; keep the two in step.
package enum QueueScripts {
    /// Enqueues one or more jobs.
    ///
    /// KEYS: pending, scheduled, stats, recent, then per job four: its hash key; its
    /// idempotency key; its unique key; the hash key of the job the caller believes holds the
    /// unique key (the job's own key again for any of the last three when there is none).
    /// ARGV: nowMs, idempotencyTTLms, queue, recentCap (0 = keep no recent list), then per
    /// job nine or ten values (the same count for every job of a call; the script tells them
    /// apart by arithmetic): id, type, payload, maxAttempts, runAtMs (0 = now), idempotencyKey
    /// ('' = none), uniqueKey ('' = none), the holder's id as believed ('' = none), label
    /// ('' = none), and optionally the W3C `traceparent` of the enqueuing span ('' = none),
    /// stored as field `traceparent` only when given. A job with an idempotency key keeps its
    /// payload's SHA-1 (`digest`), so a repeat is compared with it after the payload is dropped.
    /// Returns per job an id and a code: 1 created (this job's id); 0 a job with this id
    /// exists already, or the idempotency key named that job; 2 refused because the unique
    /// key is held by that unfinished job; 3 nothing done: the unique key is held by the job
    /// returned, not the one believed (call again naming it, so its hash is among the keys).
    /// A caller first believes no holder: a new unique key then costs one call.
    ///
    /// Producers in other languages run this script without `EnqueueRequest.validate()`, so it
    /// checks what it can first (names, lengths, maxAttempts, times, JSON, the traceparent's
    /// shape, and that every key is the one ARGV implies) and refuses the whole call with
    /// `ERR enqueue job N: rule` (N counts from 1) before writing anything. `Jobs/enqueue.lua`
    /// is this source byte for byte (no trailing newline). It writes the hash's third format.
    package static let enqueue = RedisScript(name: "enqueue", source: enqueueSource(.third))

    /// `enqueue` as versions before 2026-11-26 ran it, byte for byte: it writes the hash's
    /// first format (every field). Run instead of `enqueue` with `JobHashFormat.first`, while
    /// a rolling upgrade from such a version is under way (they cannot read the others).
    package static let enqueueFirstFormat = RedisScript(name: "enqueue-format1", source: enqueueSource(.first))

    /// `enqueue` as versions of the second format ran it, byte for byte. Run instead of
    /// `enqueue` with `JobHashFormat.second`, while a rolling upgrade from such a version is
    /// under way (they read a queued job without its `status` as no job).
    package static let enqueueSecondFormat = RedisScript(name: "enqueue-format2", source: enqueueSource(.second))

    /// The script that writes new jobs in `format`.
    package static func enqueueScript(for format: JobHashFormat) -> RedisScript {
        switch format {
        case .first: enqueueFirstFormat
        case .second: enqueueSecondFormat
        case .third, .fourth: enqueue
        }
    }

    /// The enqueue script: its checks, then the record written in one format or another
    /// (the only lines in which they differ, with how a unique key's holder is read).
    private static func enqueueSource(_ format: JobHashFormat) -> String {
        let write: String
        let helpers: String
        // A holder in the third format (and the fourth) has no status while it is queued.
        let lean = format == .third || format == .fourth
        let holderStatus =
            lean
            ? "local status = redis.call('HGET', holderKey, 'status') or (redis.call('HEXISTS', holderKey, 'type') == 1 and 'queued')"
            : "local status = redis.call('HGET', holderKey, 'status')"
        switch format {
        case .first:
            write = """
                    local status, enqueuedAt = 'queued', ARGV[1]
                    if runAt > now then status, enqueuedAt = 'scheduled', ARGV[a + 5] end
                    redis.call('HSET', jobKey, 'id', id, 'type', jtype, 'queue', queue, 'payload', payload,
                      'status', status, 'attempt', 0, 'maxAttempts', maxAttempts, 'idempotencyKey', idem,
                      'createdAt', ARGV[1], 'enqueuedAt', enqueuedAt)
                    if idem ~= '' then redis.call('HSET', jobKey, 'digest', redis.sha1hex(payload)) end
                    if label ~= '' then redis.call('HSET', jobKey, 'label', label) end
                    if traceparent ~= '' then redis.call('HSET', jobKey, 'traceparent', traceparent) end
                """
            helpers = ""
        case .second:
            write = """
                    -- What the key or a default says is left out (format 2): the id, the queue, attempt 0,
                    -- maxAttempts 0, no idempotency key, enqueuedAt equal to createdAt.
                    local record = {'type', jtype, 'payload', payload, 'status', 'queued', 'createdAt', ARGV[1]}
                    if runAt > now then
                      record[6] = 'scheduled'
                      put(record, 'enqueuedAt', ARGV[a + 5])
                    end
                """ + "\n" + leanRecordTail
            helpers = putHelper
        case .third, .fourth:
            // The fourth format differs from the third only in how a result is kept (`finish`).
            write = """
                    -- What the key or a default says is left out (format 3): the id, the queue, the status
                    -- while queued, attempt 0, maxAttempts 0, no idempotency key, enqueuedAt equal to createdAt.
                    local record = {'type', jtype, 'payload', payload, 'createdAt', ARGV[1]}
                    if runAt > now then
                      put(record, 'status', 'scheduled')
                      put(record, 'enqueuedAt', ARGV[a + 5])
                    end
                    -- The job names its unique key, so that its end frees the key (the finish script).
                    if unique ~= '' then put(record, 'unique', unique) end
                """ + "\n" + leanRecordTail
            helpers = putHelper
        }
        return enqueueChecksAndLoop(write: write, helpers: helpers, holderStatus: holderStatus, batched: lean)
    }

    /// The second and third formats' record write after its first fields: what is not a default.
    private static let leanRecordTail = """
            if tonumber(maxAttempts) ~= 0 then put(record, 'maxAttempts', maxAttempts) end
            if idem ~= '' then
              put(record, 'idempotencyKey', idem)
              put(record, 'digest', redis.sha1hex(payload))
            end
            if label ~= '' then put(record, 'label', label) end
            if traceparent ~= '' then put(record, 'traceparent', traceparent) end
            redis.call('HSET', jobKey, unpack(record))
        """

    private static let putHelper = """
        local function put(record, field, value)
          record[#record + 1] = field
          record[#record + 1] = value
        end

        """

    /// The enqueue script around a format's record write. `batched` (the third format's
    /// script) asks whether the call's ids exist with one `EXISTS` and pushes its ids onto the
    /// lists a thousand at a time, where the older scripts (frozen) ask and push per job.
    private static func enqueueChecksAndLoop(write: String, helpers: String, holderStatus: String, batched: Bool) -> String {
        let beforeLoop =
            batched
            ? """
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

            """ : ""
        let existsCheck = batched ? "if not fresh and redis.call('EXISTS', jobKey) == 1" : "if redis.call('EXISTS', jobKey) == 1"
        let push =
            batched
            ? """
                if runAt > now then
                  scheduled[#scheduled + 1] = runAt
                  scheduled[#scheduled + 1] = id
                else
                  pending[#pending + 1] = id
                end
                recent[#recent + 1] = id
            """
            : """
                if runAt > now then
                  redis.call('ZADD', KEYS[2], runAt, id)
                else
                  redis.call('LPUSH', KEYS[1], id)
                end
                if recentCap > 0 then redis.call('LPUSH', KEYS[4], id) end
            """
        let afterLoop =
            batched
            ? """
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

            """ : "if recentCap > 0 then redis.call('LTRIM', KEYS[4], 0, recentCap - 1) end\n"
        return """
            -- Every job of the call is checked before anything is written: a refused call queues nothing.
            local function refuse(job, rule)
              if job then return redis.error_reply('ERR enqueue job ' .. job .. ': ' .. rule) end
              return redis.error_reply('ERR enqueue: ' .. rule)
            end
            local NAME, QUEUE, DIGITS = '^[A-Za-z0-9_.:%-]+$', '^[A-Za-z0-9_.%-]+$', '^%d+$'
            local function ms(value) return #value <= 15 and string.find(value, DIGITS) end
            \(helpers)local queue = ARGV[3]
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
            \(beforeLoop)for i = 1, jobs do
              local jobKey, idemKey, uniqueKey, holderKey = KEYS[1 + 4 * i], KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i]
              local a = 4 + (i - 1) * per
              local id, jtype, payload, maxAttempts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
              local runAt, idem, unique, seen, label = tonumber(ARGV[a + 5]), ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
              local traceparent = ''
              if per == 10 then traceparent = ARGV[a + 10] end
              local existing, holder, stale = false, false, false
              -- The same id again (a repeated call whose reply was lost) enqueues nothing twice.
              \(existsCheck) then existing = id end
              if not existing and idem ~= '' then existing = redis.call('GET', idemKey) end
              if not existing and unique ~= '' then
                -- Held while the holder is unfinished; a finished or expired holder lets go.
                local current = redis.call('GET', uniqueKey)
                if current and current ~= seen then
                  stale = current
                elseif current then
                  \(holderStatus)
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
            \(write)
            \(push)
                counts[jtype] = (counts[jtype] or 0) + 1
                out[#out + 1] = id
                out[#out + 1] = 1
              end
            end
            \(afterLoop)for jtype, n in pairs(counts) do redis.call('HINCRBY', KEYS[3], 'enqueued:' .. jtype, n) end
            return out
            """
    }

    /// Claims up to `n` ids: moves them from pending into the consumer's active list, where
    /// a crash cannot lose them (the reaper puts the list back). `start` then runs them.
    ///
    /// KEYS: pending, active:{W}. ARGV: n. Returns the ids moved, oldest first.
    ///
    /// Three commands whatever `n` (a read, a trim and a push) leave what `n` LMOVEs from
    /// the right to the left would: Redis ran one LMOVE per job, most of a claim's time.
    package static let claim = RedisScript(
        name: "claim",
        source: """
            local n = tonumber(ARGV[1])
            if n < 1 then return {} end
            local oldest = redis.call('LRANGE', KEYS[1], -n, -1)
            if #oldest == 0 then return oldest end
            local ids = {}
            for i = #oldest, 1, -1 do ids[#ids + 1] = oldest[i] end
            -- Pushed before the trim: a push refused (a key of another type) takes nothing away.
            for s = 1, #ids, 1000 do redis.call('LPUSH', KEYS[2], unpack(ids, s, math.min(s + 999, #ids))) end
            redis.call('LTRIM', KEYS[1], 0, -#oldest - 1)
            return ids
            """
    )

    /// Starts claimed jobs: gives each id a lease, but only an id still in the caller's own
    /// active list (one reaped while the caller was paused may be running elsewhere now).
    ///
    /// The first `slots` jobs have a handler slot waiting; the rest are claimed ahead of one
    /// and wait in the worker. One of those on its last attempt is not started: a worker
    /// that crashed while it waited would have spent the attempt it never ran. It stays in
    /// the active list, claimed, its status unchanged, holding the lease token as a mark
    /// (`startWaited` starts it when its slot comes, `startClaimed` leaves it alone, a reaper
    /// takes the mark away). A job enqueued with `maxAttempts` 0 has its type's policy's,
    /// from `policies`.
    ///
    /// KEYS: active:{W}, dead, stats, then each id's hash key.
    /// ARGV: nowMs, lease token, the most attempts any of the caller's handler types allows
    /// (for jobs enqueued with 0: in the lost-worker check, and in the last-attempt check
    /// for types not in `policies`), deadTTLms, the queue's `finished` channel, slots,
    /// policies (`type max` pairs, space separated: the caller's handler types), then the ids.
    /// Returns per job eight values: id, type, payload, attempt, maxAttempts (as stored: 0
    /// means the type's policy), enqueuedAt, traceparent ('' = none), and when this attempt
    /// became due (a retry's or deferral's retryAt, else enqueuedAt); attempt 0 is a job left
    /// claimed and not started (above).
    /// Ids whose record is gone or finished are dropped; a job lost by crashed workers more
    /// often than it may run goes dead.
    package static let start = startingScript(
        "start",
        prelude: """
            local slots = tonumber(ARGV[6])
            local policies = {}
            for t, m in string.gmatch(ARGV[7], '(%S+) (%d+)') do policies[t] = tonumber(m) end
            """,
        body: """
            -- The caller's active list read once (it holds only its claims), not searched per id.
            local mine = {}
            for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do mine[id] = true end
            local listed = 0
            for i = 8, #ARGV do
              local id, key = ARGV[i], KEYS[i - 4]
              if mine[id] then
                mine[id] = nil
                if startOne(id, key, listed >= slots and policies or nil) then listed = listed + 1 end
              end
            end
            """)

    /// Starts the job a `BLMOVE` just moved to the head of the caller's active list, sent in
    /// the same write after it (`RedisDedicatedConnection.send(_:thenRun:)`), so the server
    /// runs it the moment the BLMOVE unblocks: an idle worker's pickup takes no round trip
    /// more. A head already started (the BLMOVE timed out: the head is a running job) is
    /// left alone, as is one waiting for its slot (its lease a mark, `start`) and an empty
    /// list; a head nobody started (a claim whose start reply was lost) is started. The
    /// caller starts a moved id this did not with `start`: the job's
    /// key is made here, not declared, which a cluster refuses while the slot migrates.
    ///
    /// KEYS: active:{W}, dead, stats. ARGV: as `start`'s first five, then the prefix of the
    /// queue's job keys (`PREFIX:{Q}:job:`): the job's key, in the queue's slot, is made here.
    /// Returns what `start` does, for the one job or none. The one script that reads Redis's
    /// clock: its `startedAt` (and a lost job's `finishedAt`) is when the BLMOVE unblocked.
    package static let startClaimed = startingScript(
        "startClaimed",
        prelude: """
            -- Sent before the BLMOVE waited, ARGV[1] can be a second old: the start is Redis's time
            -- (effects replication, as on Redis 7 always, lets a script write after reading it).
            if redis.replicate_commands then redis.replicate_commands() end
            local t = redis.call('TIME')
            now = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
            """,
        body: """
            local id = redis.call('LINDEX', KEYS[1], 0)
            if id then
              local head = redis.call('HMGET', ARGV[6] .. id, 'status', 'lease')
              if head[1] ~= 'processing' and not head[2] then startOne(id, ARGV[6] .. id) end
            end
            """)

    /// Starts a job `start` left waiting for its slot, now that the slot has come: only if
    /// it is still in the caller's active list, not started, and holds the mark `start` left
    /// (`mark`): a job reaped meanwhile lost the mark, and one claimed again carries another.
    ///
    /// KEYS: active:{W}, dead, stats, the job's hash key. ARGV: as `start`'s first five, then
    /// the mark, then the id. Returns what `start` does, for the one job or none.
    package static let startWaited = startingScript(
        "startWaited",
        body: """
            local id, key = ARGV[7], KEYS[4]
            local f = redis.call('HMGET', key, 'status', 'lease')
            if f[1] ~= 'processing' and f[2] == ARGV[6] and redis.call('LPOS', KEYS[1], id) then startOne(id, key) end
            """)

    /// A script that starts jobs with `startOne`: `start`'s first five arguments read, then
    /// `prelude`, then `body`; it returns what `startOne` listed.
    private static func startingScript(_ name: String, prelude: String = "", body: String) -> RedisScript {
        RedisScript(
            name: name,
            source: """
                local now, lease, defaultMax, deadTTL, channel = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
                \(prelude)
                local out = {}
                \(startOne)
                \(body)
                return out
                """)
    }

    /// Deletes a job's unique key if the key still names the job (`freeUnique(key, id)`), for
    /// the scripts that end a job; called under `pcall`, the key being made from the job's
    /// record (in the queue's slot, not declared): where a cluster refuses it while the slot
    /// migrates, the key expires with its TTL, as before.
    private static let freeUnique = """
        local function freeUnique(uniqueKey, id)
          if redis.call('GET', uniqueKey) == id then redis.call('DEL', uniqueKey) end
        end
        """

    /// `start`'s step for one claimed id in the caller's active list (`startOne(id, key,
    /// ahead)`): gives it a lease and adds what the caller runs it with to `out`; drops a job
    /// whose record is gone or finished; a job lost by crashed workers more often than it may
    /// run goes dead (and lets go of its unique key, as `finish` has a dead job do). A job
    /// claimed ahead of a handler slot (`ahead`: the handler types' attempts, by type) and
    /// on its last attempt is left claimed, not started, marked with the lease token, and
    /// listed with attempt 0. Returns whether it listed the job.
    private static let startOne =
        freeUnique + "\n" + """
            local function startOne(id, key, ahead)
              local f = redis.call('HMGET', key, 'type', 'payload', 'attempt', 'maxAttempts', 'enqueuedAt', 'status',
                'traceparent', 'retryAt', 'waiter', 'createdAt', 'unique')
              if (not f[1]) or f[6] == 'succeeded' or f[6] == 'failed' then
                redis.call('LREM', KEYS[1], -1, id)
                return false
              end
              -- A field left out holds its default (Jobs/README.md, "The job's hash").
              local attempt = tonumber(f[3] or '0') + 1
              local max = tonumber(f[4] or '0')
              local enqueuedAt = f[5] or f[10]
              if max == 0 then max = defaultMax end
              if attempt > max then
                redis.call('LREM', KEYS[1], -1, id)
                redis.call('HSET', key, 'status', 'failed', 'finishedAt', now,
                  'lastError', 'out of attempts: its workers were lost')
                redis.call('HDEL', key, 'lease')
                redis.call('PEXPIRE', key, deadTTL)
                redis.call('ZADD', KEYS[2], now, id)
                redis.call('HINCRBY', KEYS[3], 'dead:' .. f[1], 1)
                -- pcall: a server without SPUBLISH (or a user without the channel) wakes nobody but breaks nothing.
                if f[9] then pcall(redis.call, 'SPUBLISH', channel, id) end
                if f[11] then pcall(freeUnique, string.format('%sunique:%s', string.sub(key, 1, #key - #id - 4), f[11]), id) end
                return false
              end
              if ahead then
                local last = tonumber(f[4] or '0')
                if last == 0 then last = ahead[f[1]] or defaultMax end
                if attempt >= last then attempt = 0 end
              end
              if attempt > 0 then
                redis.call('HSET', key, 'status', 'processing', 'attempt', attempt, 'startedAt', now, 'lease', lease)
              else
                redis.call('HSET', key, 'lease', lease)
              end
              out[#out + 1] = id
              out[#out + 1] = f[1]
              out[#out + 1] = f[2]
              out[#out + 1] = attempt
              out[#out + 1] = f[4] or '0'
              out[#out + 1] = enqueuedAt
              out[#out + 1] = f[7] or ''
              out[#out + 1] = f[8] or enqueuedAt
              return true
            end
            """

    /// Records how jobs ended, fenced by lease: a job whose lease is not the caller's, or
    /// that is no longer in the caller's active list (reaped), is left alone. The lease that
    /// recorded an outcome stays in `acked`, so a repeated call (its first reply was lost)
    /// is told it already counted, not that it was fenced off.
    ///
    /// A job that ends (succeeded or dead) while someone waits for it (its `waiter` field,
    /// set by `watch`) is published on the queue's `finished` channel (sharded, the queue's
    /// slot): the waiter wakes at once instead of reading the record again and again.
    ///
    /// A job that ends and names its unique key (`unique`, written by `enqueue` since
    /// 2026-11-27) deletes the key if it still names the job: the key said only that the job
    /// was unfinished, and no longer outlives it by the idempotency TTL. A succeeded job drops
    /// the field with its input; a dead one keeps it, with everything else.
    ///
    /// KEYS: active:{W}, scheduled, dead, stats, then each job's hash key.
    /// ARGV: nowMs, resultTTLms, deadTTLms, the queue's `finished` channel, then per job six
    /// values: id, lease, type, outcome ('ok', 'retry', 'defer': retry with the attempt given
    /// back, or 'dead'; 'okz': 'ok' with a result `StoredResult` packed, kept in pieces of
    /// 64 bytes, `result`, `result2` and on, at most 16), result JSON or error text, retryAtMs.
    /// Returns per job 1 (recorded), 0 (fenced off) or 2 (recorded by an earlier call).
    package static let finish = RedisScript(
        name: "finish",
        source: """
            local now, resultTTL, deadTTL, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
            local out = {}
            local counts = {}
            -- PREFIX:{Q}:scheduled less 'scheduled': where the queue's unique keys are.
            local uniqueBase = string.sub(KEYS[2], 1, -10) .. 'unique:'
            """ + "\n" + freeUnique + "\n" + """
                for a = 5, #ARGV, 6 do
                  local id, lease, jtype, outcome, data, retryAt = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
                  local key = KEYS[5 + (a - 5) / 6]
                  local ok = 0
                  local f = redis.call('HMGET', key, 'lease', 'acked', 'waiter', 'unique')
                  if f[1] == lease and redis.call('LREM', KEYS[1], -1, id) == 1 then
                    ok = 1
                    local counter
                    -- An ended job lets go of its unique key, if the key still names it.
                    if f[4] and (outcome == 'ok' or outcome == 'okz' or outcome == 'dead') then
                      pcall(freeUnique, uniqueBase .. f[4], id)
                    end
                    if outcome == 'ok' or outcome == 'okz' then
                      if outcome == 'okz' then
                        -- A packed result (the fourth format), in pieces no longer than a listpack's values.
                        local set, n = {'status', 'succeeded', 'finishedAt', now, 'acked', lease}, 0
                        for i = 1, #data, 64 do
                          n = n + 1
                          set[#set + 1] = n == 1 and 'result' or 'result' .. n
                          set[#set + 1] = string.sub(data, i, i + 63)
                        end
                        redis.call('HSET', key, unpack(set))
                        -- Readers join pieces up to the first missing one: none may follow this result's.
                        if n < 16 and redis.call('HEXISTS', key, 'result' .. (n + 1)) == 1 then
                          local stale = {}
                          for k = n + 1, 16 do stale[#stale + 1] = 'result' .. k end
                          redis.call('HDEL', key, unpack(stale))
                        end
                      else
                        redis.call('HSET', key, 'status', 'succeeded', 'result', data, 'finishedAt', now, 'acked', lease)
                      end
                      -- A finished job keeps what is read (status, result, times, label), not its input.
                      local input = redis.call('HSTRLEN', key, 'payload')
                      redis.call('HDEL', key, 'lease', 'retryAt', 'payload', 'unique')
                      -- A long input made the hash a hashtable, which Redis never turns back into
                      -- a listpack (half the bytes): written afresh, the record takes one where
                      -- every value left fits the server's hash-max-listpack-value. A record of
                      -- the first format loses what its key or a default says, as the second has it.
                      if input > 64 and redis.call('OBJECT', 'ENCODING', key) == 'hashtable' then
                        local kept = redis.call('HGETALL', key)
                        local created
                        for i = 1, #kept, 2 do
                          if kept[i] == 'createdAt' then created = kept[i + 1] end
                        end
                        local fields = {}
                        for i = 1, #kept, 2 do
                          local name, value = kept[i], kept[i + 1]
                          if not (name == 'id' or name == 'queue' or (name == 'maxAttempts' and tonumber(value) == 0)
                              or (name == 'idempotencyKey' and value == '') or (name == 'enqueuedAt' and value == created)) then
                            fields[#fields + 1] = name
                            fields[#fields + 1] = value
                          end
                        end
                        redis.call('DEL', key)
                        redis.call('HSET', key, unpack(fields))
                      end
                      redis.call('PEXPIRE', key, resultTTL)
                      counter = 'succeeded:'
                    elseif outcome == 'retry' then
                      redis.call('HSET', key, 'status', 'retrying', 'lastError', data, 'retryAt', retryAt, 'acked', lease)
                      redis.call('HDEL', key, 'lease')
                      redis.call('ZADD', KEYS[2], retryAt, id)
                      counter = 'retried:'
                    elseif outcome == 'defer' then
                      redis.call('HSET', key, 'status', 'queued', 'lastError', data, 'retryAt', retryAt, 'acked', lease)
                      redis.call('HINCRBY', key, 'attempt', -1)
                      redis.call('HDEL', key, 'lease')
                      redis.call('ZADD', KEYS[2], retryAt, id)
                      counter = 'deferred:'
                    else
                      redis.call('HSET', key, 'status', 'failed', 'lastError', data, 'finishedAt', now, 'acked', lease)
                      redis.call('HDEL', key, 'lease', 'retryAt')
                      redis.call('PEXPIRE', key, deadTTL)
                      redis.call('ZADD', KEYS[3], now, id)
                      counter = 'dead:'
                    end
                    -- pcall: a server without SPUBLISH (or a user without the channel) wakes nobody but breaks nothing.
                    if f[3] and (outcome == 'ok' or outcome == 'okz' or outcome == 'dead') then pcall(redis.call, 'SPUBLISH', channel, id) end
                    counts[counter .. jtype] = (counts[counter .. jtype] or 0) + 1
                  elseif f[2] == lease then
                    ok = 2
                  end
                  out[#out + 1] = ok
                end
                for field, n in pairs(counts) do redis.call('HINCRBY', KEYS[4], field, n) end
                return out
                """
    )

    /// Whether a job's payload is `ARGV[1]`: 1 same, 0 different, -1 not known (no record,
    /// or neither payload nor digest kept).
    ///
    /// KEYS: the job's hash key.
    package static let samePayload = RedisScript(
        name: "same-payload",
        source: """
            local stored = redis.call('HMGET', KEYS[1], 'payload', 'digest')
            if stored[1] then return stored[1] == ARGV[1] and 1 or 0 end
            if stored[2] then return stored[2] == redis.sha1hex(ARGV[1]) and 1 or 0 end
            return -1
            """
    )

    /// Marks a job as waited for, unless it has ended: `finish` then publishes its id on the
    /// queue's `finished` channel when it ends. Returns its status (nil: no such job).
    ///
    /// KEYS: the job's hash key.
    package static let watch = RedisScript(
        name: "watch",
        source: """
            -- Every record has a type; a queued one of the third format has no status.
            local f = redis.call('HMGET', KEYS[1], 'status', 'type')
            if not f[2] then return nil end
            local status = f[1] or 'queued'
            if status ~= 'succeeded' and status ~= 'failed' then redis.call('HSET', KEYS[1], 'waiter', '1') end
            return status
            """
    )

    /// Moves due jobs from the scheduled set to pending.
    ///
    /// KEYS: scheduled, pending. ARGV: nowMs, limit. Returns how many moved.
    package static let promote = RedisScript(
        name: "promote",
        source: """
            local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
            if #ids == 0 then return 0 end
            redis.call('ZREM', KEYS[1], unpack(ids))
            redis.call('LPUSH', KEYS[2], unpack(ids))
            return #ids
            """
    )

    /// Puts jobs of a consumer's active list back at the head of pending, and forgets the
    /// consumer once its list is empty. Used by the reaper (a consumer whose heartbeat
    /// expired; the attempt counts, so a job that kills its workers cannot loop for ever)
    /// and on shutdown (the consumer's own jobs; the attempt is given back, since being
    /// interrupted is no failure). The caller lists the ids (LRANGE) first; ids no longer in
    /// the list are left alone, and ids that arrived since stay for the next call.
    ///
    /// KEYS: consumers, active:{W}, pending, stats, then each id's hash key.
    /// ARGV: consumer, nowMs, onlyIfExpired (1/0), refundAttempt (1/0), then the ids, in
    /// the order they go back (the last one is taken first).
    /// Returns how many jobs moved, or -1 when the consumer is alive.
    package static let release = RedisScript(
        name: "release",
        source: """
            local consumer, now, onlyIfExpired, refund = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
            if onlyIfExpired == '1' then
              local deadline = redis.call('ZSCORE', KEYS[1], consumer)
              if deadline and tonumber(deadline) > now then return -1 end
            end
            local n = 0
            for i = 5, #ARGV do
              local id, key = ARGV[i], KEYS[i]
              if redis.call('LREM', KEYS[2], -1, id) == 1 then
                redis.call('RPUSH', KEYS[3], id)
                n = n + 1
                if redis.call('EXISTS', key) == 1 then
                  -- Only a started job spent an attempt: one claimed but not yet started
                  -- (BLMOVE done, start not) keeps the count it has, as in requeueOrphans.
                  local started = redis.call('HGET', key, 'status') == 'processing'
                  redis.call('HSET', key, 'status', 'queued')
                  redis.call('HDEL', key, 'lease')
                  if refund == '1' and started and tonumber(redis.call('HGET', key, 'attempt') or '0') > 0 then
                    redis.call('HINCRBY', key, 'attempt', -1)
                  end
                end
              end
            end
            if redis.call('LLEN', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], consumer) end
            if n > 0 and refund ~= '1' then redis.call('HINCRBY', KEYS[4], 'reaped', n) end
            return n
            """
    )

    /// Puts ids that a live consumer holds without running them (the reply to `claim`,
    /// BLMOVE or `start` was lost with its connection, or a failover lost its ack) back at
    /// the head of pending. An id
    /// already gone from the active list is left alone; a started job gets its attempt back.
    ///
    /// KEYS: active:{W}, pending, then each id's hash key. ARGV: the ids. Returns how many moved.
    package static let requeueOrphans = RedisScript(
        name: "requeueOrphans",
        source: """
            local n = 0
            for i = 1, #ARGV do
              local id, key = ARGV[i], KEYS[i + 2]
              if redis.call('LREM', KEYS[1], -1, id) == 1 then
                if redis.call('HGET', key, 'status') == 'processing' then
                  redis.call('HINCRBY', key, 'attempt', -1)
                  redis.call('HSET', key, 'status', 'queued')
                end
                -- A lease, or the mark of a job left waiting for its slot (`start`).
                redis.call('HDEL', key, 'lease')
                redis.call('RPUSH', KEYS[2], id)
                n = n + 1
              end
            end
            return n
            """
    )

    /// Sends dead jobs back to pending with their attempts reset; an id whose record is no
    /// longer failed (the dead one expired, and a job was enqueued again with its id) only
    /// leaves the dead set. A job that names its unique key (`unique`) holds it again, for
    /// the idempotency TTL, unless another job took it meanwhile (the key is made here, in
    /// the queue's slot, not declared, as `finish` makes it).
    ///
    /// KEYS: dead, pending, then each id's hash key. ARGV: the idempotency TTL (ms), then the
    /// ids. Returns how many were requeued.
    package static let retryDead = RedisScript(
        name: "retryDead",
        source: """
            local n = 0
            local uniqueBase = string.sub(KEYS[1], 1, -5) .. 'unique:'
            local function holdUnique(uniqueKey, id)
              redis.call('SET', uniqueKey, id, 'NX', 'PX', ARGV[1])
            end
            for i = 2, #ARGV do
              local id, key = ARGV[i], KEYS[i + 1]
              -- Only a record that is still the dead job's: once it expired, a job enqueued
              -- again with the same id (a notification's, a renewal check's) is not this one.
              if redis.call('ZREM', KEYS[1], id) == 1 and redis.call('HGET', key, 'status') == 'failed' then
                redis.call('PERSIST', key)
                redis.call('HSET', key, 'status', 'queued', 'attempt', 0)
                redis.call('HDEL', key, 'finishedAt', 'retryAt')
                local unique = redis.call('HGET', key, 'unique')
                if unique then pcall(holdUnique, uniqueBase .. unique, id) end
                redis.call('LPUSH', KEYS[2], id)
                n = n + 1
              end
            end
            return n
            """
    )

    /// Deletes dead jobs and their records; an id not in the dead set keeps its record, and so
    /// does a record that is not failed (the dead one expired and a job was enqueued again
    /// with its id). Trimming the dead set uses it too, with the ids it read.
    ///
    /// KEYS: dead, then each id's hash key. ARGV: the ids. Returns how many were removed.
    package static let purgeDead = RedisScript(
        name: "purgeDead",
        source: """
            local n = 0
            for i = 1, #ARGV do
              if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
                if redis.call('HGET', KEYS[i + 1], 'status') == 'failed' then redis.call('DEL', KEYS[i + 1]) end
                n = n + 1
              end
            end
            return n
            """
    )

    /// An effect applied at most once per job id, counted: what `noop` does with `"effect"`.
    ///
    /// KEYS: effects hash, marker key. ARGV: marker TTL ms.
    /// Returns 1 when the effect happened now, 0 when it had already happened.
    package static let applyEffectOnce = RedisScript(
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
