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
/// larger: they grow across the fence key's expiry (a week after the last acquisition), so a
/// job that asks about a transaction nobody holds (a refused transfer, garbage) leaves no
/// key behind for ever.
///
/// Keys (hash-tagged by the transaction id, so both sit in one Redis Cluster slot):
/// - `{prefix}:ent:P:lock:{T}`: `jobId:token`, with the lease as TTL
/// - `{prefix}:ent:P:fence:{T}`: the last token handed out, for a week
package struct TransactionLock: Sendable {
    /// What a holder carries into its writes.
    package struct Token: Sendable, Hashable {
        package let originalTransactionId: String
        package let value: Int
    }

    package let redis: RedisConnectionPool
    package let prefix: String
    /// How long a lock outlives a holder that never releases it (a crashed worker).
    package var lease: Duration
    /// How long the last token is remembered after the last acquisition.
    static let fenceRetention = Duration.seconds(7 * 86_400)

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

    /// Takes the lock for `job`; `nil` when another job holds it.
    package func acquire(publisher: String, originalTransactionId: String, job: String) async throws -> Token? {
        let reply = try await redis.run(
            Self.acquireScript, keys: keys(publisher, originalTransactionId),
            arguments: [job, String(lease.milliseconds), String(Self.fenceRetention.milliseconds)])
        return Self.token(reply, originalTransactionId: originalTransactionId)
    }

    /// Takes the locks in one round trip (per server), with a claim's reads after them where
    /// the client sends a pipeline in order to one server (`RedisConnectionPool.runsPipelinesInOrder`:
    /// a single server, not a cluster nor Sentinel), so they read what they would once the
    /// locks are held. Returns the tokens taken (none for a lock another job holds) and the
    /// claim's read, `nil` when it is not known to have run after every lock was taken: not
    /// sent (a cluster, Sentinel), a lock not taken, or an acquisition the client sent again
    /// (a script the server did not have cached): the caller reads once it holds the locks. A failure after some locks were taken throws
    /// `PartialAcquisition`, naming them for the caller to release.
    package func acquire(
        publisher: String, originalTransactionIds: [String], job: String, reading query: EntitlementStore.ClaimQuery? = nil
    ) async throws -> (tokens: [String: Token], read: EntitlementStore.ClaimRead?) {
        let acquisitions = originalTransactionIds.map { id in
            RedisCall.script(
                Self.acquireScript, keys: keys(publisher, id),
                arguments: [job, String(lease.milliseconds), String(Self.fenceRetention.milliseconds)])
        }
        let reads = redis.runsPipelinesInOrder ? query : nil
        // After the reads, each lock's fence: it holds this acquisition's token only if it was
        // read after the lock was taken, and so were the reads before it. On a single server
        // the client sends again only a script the server had not cached (NOSCRIPT), after
        // the commands beside it have run: the fence read then shows an older token.
        let fences = reads == nil ? [] : originalTransactionIds.map { RedisCall.command(["GET", keys(publisher, $0)[1]]) }
        let results = try await redis.execute(acquisitions + (reads?.calls ?? []) + fences)
        var tokens: [String: Token] = [:]
        var failure: (any Error)?
        for (id, result) in zip(originalTransactionIds, results) {
            switch result {
            case .success(let reply): tokens[id] = Self.token(reply, originalTransactionId: id)
            case .failure(let error): failure = failure ?? error
            }
        }
        if let failure { throw PartialAcquisition(tokens: tokens, error: failure) }
        guard let reads, tokens.count == originalTransactionIds.count else { return (tokens, nil) }
        let fenced = zip(originalTransactionIds, results.suffix(fences.count)).allSatisfy { id, result in
            (try? result.get().string).flatMap { Int($0) } == tokens[id]?.value
        }
        guard fenced else { return (tokens, nil) }
        do {
            return (tokens, try reads.decode(results.dropFirst(acquisitions.count).dropLast(fences.count)))
        } catch {
            throw PartialAcquisition(tokens: tokens, error: error)
        }
    }

    /// Locks asked for together were taken only in part, or their reads failed: the locks
    /// taken, for the caller to release, and why.
    package struct PartialAcquisition: Error {
        package var tokens: [String: Token]
        package var error: any Error
    }

    static func token(_ reply: RedisReply, originalTransactionId: String) -> Token? {
        guard let value = reply.int, value > 0 else { return nil }
        return Token(originalTransactionId: originalTransactionId, value: value)
    }

    /// Releases the lock if `job` still holds it with `token`.
    package func release(publisher: String, token: Token, job: String) async throws {
        if let failed = try await release([token], publisher: publisher, job: job, with: ClosingWrites()).first { throw failed.error }
    }

    /// Releases these locks of `job`, sending `writes` first in the same round trip (per
    /// server). Returns the locks whose release failed, with why (each expires with its
    /// lease); throws the first write that failed (after the releases were sent).
    package func release(
        _ tokens: [Token], publisher: String, job: String, with writes: ClosingWrites
    ) async throws -> [(token: Token, error: any Error)] {
        let closing = writes.take()
        let releases = tokens.map { token in
            RedisCall.script(Self.releaseScript, keys: [keys(publisher, token.originalTransactionId)[0]], arguments: ["\(job):\(token.value)"])
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
