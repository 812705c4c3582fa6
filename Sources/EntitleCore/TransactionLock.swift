import DurationUnits
import RedisClient

/// One job at a time per original transaction id (a subscription, a purchase), with a
/// fencing token: each acquisition takes a number larger than every earlier one, and the
/// entitlement store refuses a write carrying a smaller number than one already written.
///
/// The lock is held by a job id, so a job that runs again after its worker died (reclaimed
/// by another) takes its own lock back at once; other jobs wait until it is released or its
/// lease runs out.
///
/// Tokens are Redis's clock in microseconds, or one more than the last token when that is
/// larger: they grow across the fence key's expiry (a day after the last acquisition), so a
/// job that asks about a transaction nobody holds (a refused transfer, garbage) leaves no
/// key behind for ever.
///
/// Keys (hash-tagged by the transaction id, so both sit in one Redis Cluster slot):
/// - `{prefix}:ent:P:lock:{T}`: `jobId:token`, with the lease as TTL
/// - `{prefix}:ent:P:fence:{T}`: the last token handed out, for a day
package struct TransactionLock: Sendable {
    /// What a holder carries into its writes.
    package struct Token: Sendable, Hashable {
        package let originalTransactionId: String
        package let value: Int

        package init(originalTransactionId: String, value: Int) {
            self.originalTransactionId = originalTransactionId
            self.value = value
        }

        /// Whether the fence key (`GET` of it, `fence`) holds a later token than this one: a
        /// later job took the lock (this one's lease ran out). An expired fence holds none.
        package func passedOn(_ fence: RedisReply) -> Bool {
            (fence.string.flatMap { Int($0) } ?? 0) > value
        }
    }

    package let redis: RedisConnectionPool
    package let prefix: String
    /// How long a lock outlives a holder that never releases it (a crashed worker).
    package var lease: Duration
    /// How long the last token is remembered after the last acquisition. The clock alone
    /// makes a later acquisition's token larger; the key is there for a clock that steps
    /// back (an NTP correction, a failover to a host whose clock is behind), by seconds, not
    /// days. A day of keys is a day of purchases' (about 160 bytes each); a week was seven.
    static let fenceRetention = Duration.seconds(86_400)

    package init(redis: RedisConnectionPool, prefix: String, lease: Duration = .seconds(90)) {
        self.redis = redis
        self.prefix = prefix
        self.lease = lease
    }

    static let acquireScript = RedisScript(
        name: "transaction-lock-acquire",
        source: """
            local holder = redis.call('GET', KEYS[1])
            if holder and string.sub(holder, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then return 0 end
            local time = redis.call('TIME')
            local token = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
            local text = string.format('%.0f', token)
            redis.call('SET', KEYS[2], text, 'PX', ARGV[3])
            redis.call('SET', KEYS[1], ARGV[1] .. ':' .. text, 'PX', ARGV[2])
            return token
            """)

    static let releaseScript = RedisScript(
        name: "transaction-lock-release",
        source: """
            if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
            return 0
            """)

    func keys(_ publisher: String, _ originalTransactionId: String) -> [String] {
        let keys = EntitlementKeys(prefix: prefix)
        return [keys.lock(publisher, originalTransactionId), keys.fence(publisher, originalTransactionId)]
    }

    /// The acquire script's arguments: the holder, the lease and the fence's retention (ms).
    func acquireArguments(_ job: String) -> [String] {
        [job, String(lease.milliseconds), String(Self.fenceRetention.milliseconds)]
    }

    /// Takes the lock for `job`; `nil` when another job holds it.
    package func acquire(publisher: String, originalTransactionId: String, job: String) async throws -> Token? {
        let reply = try await redis.run(
            Self.acquireScript, keys: keys(publisher, originalTransactionId),
            arguments: acquireArguments(job))
        guard let value = reply.int, value > 0 else { return nil }
        return Token(originalTransactionId: originalTransactionId, value: value)
    }

    /// Takes the locks of these transactions for `job` in one round trip, with `reads` after
    /// them on the same connection: on one server they run once the locks are taken (the
    /// locks go by their source, so a server that lost its scripts cannot run them after the
    /// reads). Only where `RedisConfiguration.runsPipelinesInOrder`: elsewhere they would run
    /// in no set order. Every lock is asked, even after one found busy (the caller gives back
    /// those it got); one server runs a connection's pipeline in one go as a rule, so two jobs
    /// wanting the same locks seldom get one each.
    /// Returns the locks taken, the first error a lock's call replied, and the reads' replies.
    package func acquire(
        _ originalTransactionIds: [String], publisher: String, job: String, then reads: [[String]]
    ) async throws -> (tokens: [String: Token], error: RedisError?, reads: [Result<RedisReply, RedisError>]) {
        let locking = originalTransactionIds.map { id in
            RedisCall.scriptInPlace(Self.acquireScript, keys: keys(publisher, id), arguments: acquireArguments(job))
        }
        let results = try await redis.execute(locking + reads.map(RedisCall.command))
        var tokens: [String: Token] = [:]
        var error: RedisError?
        for (id, result) in zip(originalTransactionIds, results) {
            switch result {
            case .success(let reply):
                if let value = reply.int, value > 0 { tokens[id] = Token(originalTransactionId: id, value: value) }
            case .failure(let failure):
                error = error ?? failure
            }
        }
        return (tokens, error, Array(results.dropFirst(locking.count)))
    }

    /// Releases the lock if `job` still holds it with `token`.
    package func release(publisher: String, token: Token, job: String) async throws {
        if let failed = try await release([token], publisher: publisher, job: job, with: ClosingWrites()).first { throw failed.error }
    }

    /// The lock keys of these tokens and the values `job` left in them, for a write that
    /// releases them itself (`ClosingWrites.offer(locks:)`): deleted only while they hold them.
    package func releaseInWrite(_ tokens: [Token], publisher: String, job: String) -> (keys: [String], values: [String]) {
        let sorted = tokens.sorted { $0.originalTransactionId < $1.originalTransactionId }
        return (sorted.map { keys(publisher, $0.originalTransactionId)[0] }, sorted.map { "\(job):\($0.value)" })
    }

    /// Releases these locks of `job`, sending `writes` first in the same round trip (per
    /// server). Returns the locks whose release failed, with why (each expires with its
    /// lease); throws the first write that failed (after the releases were sent).
    package func release(
        _ tokens: [Token], publisher: String, job: String, with writes: ClosingWrites
    ) async throws -> [(token: Token, error: any Error)] {
        let closing = writes.take()
        guard !(closing.isEmpty && tokens.isEmpty) else { return [] }
        let releases = tokens.map { token in
            RedisCall.script(
                Self.releaseScript, keys: [keys(publisher, token.originalTransactionId)[0]], arguments: ["\(job):\(token.value)"])
        }
        let results: [Result<RedisReply, RedisError>]
        do {
            results = try await redis.execute(closing + releases)
        } catch {
            if closing.isEmpty { return tokens.map { ($0, error) } }
            throw error
        }
        if let failed = results.prefix(closing.count).first(where: { if case .failure = $0 { true } else { false } }),
            case .failure(let error) = failed
        {
            throw error
        }
        return zip(tokens, results.dropFirst(closing.count)).compactMap { token, result in
            if case .failure(let error) = result { return (token, error) }
            return nil
        }
    }
}
