import RedisClient

/// One job at a time per original transaction id (a subscription, a purchase), with a
/// fencing token: each acquisition takes a number larger than every earlier one, and the
/// entitlement store refuses a write carrying a smaller number than one already written.
///
/// The lock is held by a job id, so a job that runs again after its worker died (reclaimed
/// by another) takes its own lock back at once; other jobs wait until it is released or its
/// lease runs out.
///
/// Keys (hash-tagged by the transaction id, so both sit in one Redis Cluster slot):
/// - `{prefix}:ent:P:lock:{T}`: `jobId:token`, with the lease as TTL
/// - `{prefix}:ent:P:fence:{T}`: the last token handed out (never expires)
public struct TransactionLock: Sendable {
    /// What a holder carries into its writes.
    public struct Token: Sendable, Hashable {
        public let originalTransactionId: String
        public let value: Int
    }

    public let redis: RedisConnectionPool
    public let prefix: String
    /// How long a lock outlives a holder that never releases it (a crashed worker).
    public var lease: Duration

    public init(redis: RedisConnectionPool, prefix: String, lease: Duration = .seconds(90)) {
        self.redis = redis
        self.prefix = prefix
        self.lease = lease
    }

    static let acquireScript = RedisScript(
        name: "transaction-lock-acquire",
        source: """
            local holder = redis.call('GET', KEYS[1])
            if holder and string.sub(holder, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then return 0 end
            local token = redis.call('INCR', KEYS[2])
            redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
            return token
            """)

    static let releaseScript = RedisScript(
        name: "transaction-lock-release",
        source: """
            if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
            return 0
            """)

    func keys(_ publisher: String, _ originalTransactionId: String) -> [String] {
        let tag = "{\(originalTransactionId)}"
        return ["\(prefix):ent:\(publisher):lock:\(tag)", "\(prefix):ent:\(publisher):fence:\(tag)"]
    }

    /// Takes the lock for `job`; `nil` when another job holds it.
    public func acquire(publisher: String, originalTransactionId: String, job: String) async throws -> Token? {
        let reply = try await redis.run(
            Self.acquireScript, keys: keys(publisher, originalTransactionId),
            arguments: [job, String(lease.components.seconds * 1000)])
        guard let value = reply.int, value > 0 else { return nil }
        return Token(originalTransactionId: originalTransactionId, value: value)
    }

    /// Releases the lock if `job` still holds it with `token`.
    public func release(publisher: String, token: Token, job: String) async throws {
        _ = try await redis.run(
            Self.releaseScript, keys: [keys(publisher, token.originalTransactionId)[0]], arguments: ["\(job):\(token.value)"])
    }
}
