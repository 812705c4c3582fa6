import Foundation
import Logging
import Metrics
import RedisClient
import Synchronization

/// The producer and operator side of the queue: enqueue, read jobs, queue statistics,
/// the dead set, and the maintenance steps (promote, reap, trim) that workers run.
///
/// Every state change is one Lua script (see `QueueScripts`), so a crash in the middle
/// leaves no job half-enqueued or half-moved.
public final class JobQueue: Sendable {
    public let redis: RedisConnectionPool
    public let configuration: JobQueueConfiguration
    let logger: Logger
    let metrics: QueueMetrics
    /// Queues this instance has already added to the registry set.
    private let registeredQueues = Mutex<Set<String>>([])

    /// Jobs per `enqueue` script call in bulk enqueues.
    static let enqueueChunk = 500

    public init(redis: RedisConnectionPool, configuration: JobQueueConfiguration = .init(), logger: Logger) {
        self.redis = redis
        self.configuration = configuration
        self.logger = logger
        self.metrics = QueueMetrics.shared
    }

    // MARK: Enqueue

    /// Enqueues one job. With an idempotency key already in use, returns that job's id.
    public func enqueue(_ request: EnqueueRequest) async throws -> EnqueueResult {
        try await enqueue(batch: [request])[0]
    }

    /// Enqueues many jobs in as few round trips as possible (500 per script call, all calls
    /// of one queue pipelined). Every request is validated first: one bad request enqueues nothing.
    public func enqueue(batch requests: [EnqueueRequest]) async throws -> [EnqueueResult] {
        for request in requests { try request.validate() }
        return try await enqueue(validated: requests)
    }

    /// `enqueue(batch:)` for requests already validated one by one (`EnqueueBatcher`).
    func enqueue(validated requests: [EnqueueRequest]) async throws -> [EnqueueResult] {
        let now = Self.nowMilliseconds()
        var results = [EnqueueResult?](repeating: nil, count: requests.count)
        let byQueue = Dictionary(grouping: requests.indices, by: { requests[$0].queue })
        try await redis.withConnection { connection in
            for (queue, indices) in byQueue.sorted(by: { $0.key < $1.key }) {
                let keys = configuration.keys(queue)
                var calls: [(keys: [String], arguments: [String])] = []
                var chunks: [ArraySlice<Int>] = []
                for start in stride(from: 0, to: indices.count, by: Self.enqueueChunk) {
                    let chunk = indices[start..<min(start + Self.enqueueChunk, indices.count)]
                    var callKeys = [keys.pending, keys.scheduled, keys.stats, keys.recent]
                    var arguments = [
                        String(now), String(configuration.idempotencyTTL.milliseconds), queue, String(configuration.recentJobs),
                    ]
                    callKeys.reserveCapacity(4 + chunk.count * 3)
                    arguments.reserveCapacity(4 + chunk.count * 7)
                    for index in chunk {
                        let request = requests[index]
                        let id = request.id ?? Self.makeID()
                        let jobKey = keys.job(id)
                        callKeys.append(jobKey)
                        callKeys.append(request.idempotencyKey.map(keys.idempotency) ?? jobKey)
                        callKeys.append(request.uniqueKey.map(keys.unique) ?? jobKey)
                        let runAt = request.delay.map { $0 > .zero ? now + $0.milliseconds : 0 } ?? 0
                        arguments.append(contentsOf: [
                            id, request.type, request.payload, String(request.maxAttempts), String(runAt),
                            request.idempotencyKey ?? "", request.uniqueKey ?? "",
                        ])
                    }
                    calls.append((callKeys, arguments))
                    chunks.append(chunk)
                }
                // Discovery only, so outside the scripts, and once per queue: a queue appears in `entitle queues`.
                if !registeredQueues.withLock({ $0.contains(queue) }) {
                    try await connection.send(["SADD", QueueKeys.registry(prefix: configuration.prefix), queue])
                    _ = registeredQueues.withLock { $0.insert(queue) }
                }
                let replies = try await connection.runPipelined(QueueScripts.enqueue, calls: calls)
                for (chunk, reply) in zip(chunks, replies) {
                    guard let values = try reply.get().array, values.count == chunk.count * 2 else {
                        throw JobQueueError(.unexpectedReply, "enqueue returned a reply of the wrong shape")
                    }
                    for (offset, index) in chunk.enumerated() {
                        let outcome: EnqueueResult.Outcome =
                            switch values[offset * 2 + 1].int {
                            case 1: .created
                            case 2: .conflict
                            default: .existing
                            }
                        results[index] = EnqueueResult(id: values[offset * 2].string ?? "", outcome: outcome)
                        if outcome == .created { metrics.forJob(queue: queue, type: requests[index].type).enqueued.increment() }
                    }
                }
            }
        }
        return try results.map { result in
            guard let result else { throw JobQueueError(.unexpectedReply, "enqueue returned fewer jobs than it was given") }
            return result
        }
    }

    // MARK: Reading jobs

    /// The job with this id, looked up in `queue`, or in every known queue when `nil`.
    public func job(id: String, queue: String? = nil) async throws -> JobRecord? {
        let queues: [String]
        if let queue { queues = [queue] } else { queues = try await knownQueues() }
        guard !queues.isEmpty else { return nil }
        let replies = try await redis.pipeline(queues.map { ["HGETALL", configuration.keys($0).job(id)] })
        return replies.lazy.compactMap { JobRecord(fields: $0.fieldValues) }.first
    }

    /// The queues that producers and workers have used, sorted.
    /// The most recently enqueued jobs of `queue`, newest first (those whose records have
    /// expired are left out).
    public func recentJobs(queue: String, limit: Int = 50) async throws -> [JobRecord] {
        let keys = configuration.keys(queue)
        let ids = try await redis.send(["LRANGE", keys.recent, "0", String(max(0, limit - 1))]).array?.compactMap(\.string) ?? []
        guard !ids.isEmpty else { return [] }
        return try await redis.pipeline(ids.map { ["HGETALL", keys.job($0)] }).compactMap { JobRecord(fields: $0.fieldValues) }
    }

    public func knownQueues() async throws -> [String] {
        let reply = try await redis.send(["SMEMBERS", QueueKeys.registry(prefix: configuration.prefix)])
        return (reply.array ?? []).compactMap(\.string).sorted()
    }

    /// Counts for one queue, read in two round trips. Reading them also sets the queue's
    /// gauges (`entitle_queue_pending`, ...), so a process that serves metrics and reads
    /// stats at scrape time (the API) exports them.
    public func stats(queue: String) async throws -> QueueStats {
        let keys = configuration.keys(queue)
        let first = try await redis.pipeline([
            ["LLEN", keys.pending], ["ZCARD", keys.scheduled], ["ZCARD", keys.dead], ["LINDEX", keys.pending, "-1"],
            ["HGETALL", keys.stats], ["ZRANGE", keys.consumers, "0", "-1"],
        ])
        let consumers = (first[5].array ?? []).compactMap(\.string)
        var second = consumers.map { ["LLEN", keys.active($0)] }
        if let oldest = first[3].string { second.append(["HGET", keys.job(oldest), "enqueuedAt"]) }
        let more = second.isEmpty ? [] : try await redis.pipeline(second)
        let active = more.prefix(consumers.count).reduce(0) { $0 + ($1.int ?? 0) }
        var oldestAge: Double = 0
        if first[3].string != nil, let enqueuedAt = more.last?.int {
            oldestAge = max(0, Double(Self.nowMilliseconds() - Int64(enqueuedAt)) / 1000)
        }
        let stats = QueueStats(
            name: queue, pending: first[0].int ?? 0, scheduled: first[1].int ?? 0, active: active,
            dead: first[2].int ?? 0, oldestPendingAgeSeconds: oldestAge, consumers: consumers.count,
            counters: first[4].fieldValues.compactMapValues { Int($0) }
        )
        metrics.record(stats)
        return stats
    }

    // MARK: Dead jobs

    /// The newest dead jobs first.
    public func deadJobs(queue: String, limit: Int = 100) async throws -> [JobRecord] {
        let keys = configuration.keys(queue)
        let ids = try await redis.send(["ZREVRANGE", keys.dead, "0", String(max(0, limit - 1))]).array?.compactMap(\.string) ?? []
        guard !ids.isEmpty else { return [] }
        return try await redis.pipeline(ids.map { ["HGETALL", keys.job($0)] }).compactMap { JobRecord(fields: $0.fieldValues) }
    }

    /// Sends dead jobs (all of them when `ids` is `nil`) back to pending with fresh attempts.
    @discardableResult
    public func retryDead(queue: String, ids: [String]? = nil) async throws -> Int {
        try await forDeadJobs(queue: queue, ids: ids) { keys, chunk in
            try await self.redis.run(QueueScripts.retryDead, keys: [keys.dead, keys.pending], arguments: [keys.jobPrefix] + chunk)
        }
    }

    /// Deletes dead jobs (all of them when `ids` is `nil`) and their records.
    @discardableResult
    public func purgeDead(queue: String, ids: [String]? = nil) async throws -> Int {
        try await forDeadJobs(queue: queue, ids: ids) { keys, chunk in
            try await self.redis.run(QueueScripts.purgeDead, keys: [keys.dead], arguments: [keys.jobPrefix] + chunk)
        }
    }

    private func forDeadJobs(
        queue: String, ids: [String]?, _ body: (QueueKeys, [String]) async throws -> RedisReply
    ) async throws -> Int {
        let keys = configuration.keys(queue)
        var total = 0
        if let ids {
            for start in stride(from: 0, to: ids.count, by: 500) {
                total += try await body(keys, Array(ids[start..<min(start + 500, ids.count)])).int ?? 0
            }
            return total
        }
        while true {
            let chunk = try await redis.send(["ZRANGE", keys.dead, "0", "499"]).array?.compactMap(\.string) ?? []
            if chunk.isEmpty { return total }
            total += try await body(keys, chunk).int ?? 0
        }
    }

    // MARK: Maintenance

    /// Moves scheduled jobs whose time has come to pending; returns how many.
    @discardableResult
    public func promoteDueJobs(queue: String, limit: Int = 1000) async throws -> Int {
        let keys = configuration.keys(queue)
        return try await redis.run(
            QueueScripts.promote, keys: [keys.scheduled, keys.pending],
            arguments: [String(Self.nowMilliseconds()), String(limit)]
        ).int ?? 0
    }

    /// Puts the active jobs of every consumer whose heartbeat expired back in pending;
    /// returns how many jobs moved.
    @discardableResult
    public func reapExpiredConsumers(queue: String) async throws -> Int {
        let keys = configuration.keys(queue)
        let now = Self.nowMilliseconds()
        let expired = try await redis.send(["ZRANGEBYSCORE", keys.consumers, "-inf", String(now)]).array?.compactMap(\.string) ?? []
        var moved = 0
        for consumer in expired {
            let count = try await release(consumer: consumer, queue: queue, onlyIfExpired: true)
            if count > 0 {
                moved += count
                metrics.forQueue(queue).reaped.increment(by: Int64(count))
                logger.warning(
                    "reaped jobs of a lost consumer", metadata: ["queue": "\(queue)", "consumer": "\(consumer)", "jobs": "\(count)"])
            }
        }
        return moved
    }

    /// Moves a consumer's active jobs back to pending and forgets the consumer.
    /// - Parameter onlyIfExpired: leave it alone when its heartbeat is current (the reaper);
    ///   `false` for a consumer giving its own jobs back on shutdown, which keeps their attempts.
    /// - Returns: the jobs moved, or -1 when the consumer turned out to be alive.
    @discardableResult
    public func release(consumer: String, queue: String, onlyIfExpired: Bool) async throws -> Int {
        let keys = configuration.keys(queue)
        return try await redis.run(
            QueueScripts.release, keys: [keys.consumers, keys.active(consumer), keys.pending, keys.stats],
            arguments: [consumer, String(Self.nowMilliseconds()), onlyIfExpired ? "1" : "0", onlyIfExpired ? "0" : "1", keys.jobPrefix]
        ).int ?? 0
    }

    /// Applies the dead set's caps (count and age); returns how many records were removed.
    @discardableResult
    public func trimDeadJobs(queue: String) async throws -> Int {
        let keys = configuration.keys(queue)
        let oldest = Self.nowMilliseconds() - configuration.deadTTL.milliseconds
        return try await redis.run(
            QueueScripts.trimDead, keys: [keys.dead],
            arguments: [keys.jobPrefix, String(configuration.deadMaxCount), String(oldest)]
        ).int ?? 0
    }

    // MARK: Helpers

    static func nowMilliseconds() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// A random job id: 32 lowercase hex digits.
    static func makeID() -> String {
        var generator = SystemRandomNumberGenerator()
        return pad(generator.next()) + pad(generator.next())
    }

    private static func pad(_ value: UInt64) -> String {
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
