import DurationUnits
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

    /// Enqueues many jobs in as few round trips as possible (500 per script call, the calls
    /// pipelined per Redis server). Every request is validated first: one bad request
    /// enqueues nothing. When Redis fails part way, the error says which jobs were enqueued:
    /// `JobQueueError.partiallyEnqueued` with `enqueued` (nothing at all enqueued throws the
    /// Redis error itself).
    public func enqueue(batch requests: [EnqueueRequest]) async throws -> [EnqueueResult] {
        for request in requests { try request.validate() }
        return try await JobTracing.withEnqueueSpan(requests) { try await enqueue(validated: $0) }
    }

    /// `enqueue(batch:)` for requests already validated one by one.
    func enqueue(validated requests: [EnqueueRequest]) async throws -> [EnqueueResult] {
        let outcomes = await enqueueEach(validated: requests)
        var results: [EnqueueResult?] = []
        var firstError: (any Error)?
        for outcome in outcomes {
            switch outcome {
            case .success(let result): results.append(result)
            case .failure(let error):
                results.append(nil)
                if firstError == nil { firstError = error }
            }
        }
        guard let firstError else { return results.compactMap { $0 } }
        let enqueued = results.compactMap { $0 }.count
        if enqueued == 0 { throw firstError }
        throw JobQueueError(
            .partiallyEnqueued, "\(enqueued) of \(requests.count) jobs were enqueued; the others were not: \(firstError)",
            enqueued: results)
    }

    /// Marks `mismatch` each repeat of an idempotency key that must match (`repeatMustMatch`)
    /// whose first job has another payload: one read, and only for such repeats.
    func refusingDifferentRepeats(
        _ outcomes: [Result<EnqueueResult, any Error>], _ requests: [EnqueueRequest]
    ) async -> [Result<EnqueueResult, any Error>] {
        let checked = requests.indices.filter { index in
            guard requests[index].repeatMustMatch, case .success(let result) = outcomes[index] else { return false }
            return result.outcome == .existing
        }
        guard !checked.isEmpty else { return outcomes }
        var answered = outcomes
        do {
            // The first job's payload, or its digest once it succeeded and dropped the payload.
            var compared: [RedisReply] = []
            for index in checked {
                let id = (try? outcomes[index].get().id) ?? ""
                compared.append(
                    try await redis.run(
                        QueueScripts.samePayload, keys: [configuration.keys(requests[index].queue).job(id)],
                        arguments: [requests[index].payload]))
            }
            for (index, same) in zip(checked, compared) {
                // A record already expired cannot be compared: the key's job is answered as before.
                if same.int == 0, case .success(var result) = outcomes[index] {
                    result.outcome = .mismatch
                    answered[index] = .success(result)
                }
            }
        } catch {
            for index in checked { answered[index] = .failure(error) }
        }
        return answered
    }

    /// Enqueues each request and says, for each, what happened: a failure of one script call
    /// fails only its own requests. Calls whose connection broke are sent again with the same
    /// ids (a job id that exists already is not enqueued twice), so a lost reply costs nothing.
    func enqueueEach(validated requests: [EnqueueRequest]) async -> [Result<EnqueueResult, any Error>] {
        var outcomes = [Result<EnqueueResult, any Error>?](repeating: nil, count: requests.count)
        // Ids are fixed once, so that sending a call again cannot make a second job.
        let fresh = Self.makeIDs(requests.count { $0.id == nil })
        var used = 0
        let ids = requests.map { request in
            if let id = request.id { return id }
            used += 1
            return fresh[used - 1]
        }
        var todo = Array(requests.indices)
        // Unique keys' holders as last seen, by request index. None at first (most requests
        // are about a new transaction): a call that finds one returns its id (outcome 3) and
        // goes again at once naming it, so a new key costs one round trip and a held one two.
        var holders: [Int: String] = [:]
        var attempt = 0
        while !todo.isEmpty {
            attempt += 1
            let now = Self.nowMilliseconds()
            var retry: [Int] = []
            var backOff = false
            do {
                var calls: [(keys: [String], arguments: [String])] = []
                var chunks: [ArraySlice<Int>] = []
                var seenQueues: [String] = []
                let byQueue = Dictionary(grouping: todo, by: { requests[$0].queue })
                for (queue, indices) in byQueue.sorted(by: { $0.key < $1.key }) {
                    seenQueues.append(queue)
                    let keys = configuration.keys(queue)
                    for start in stride(from: 0, to: indices.count, by: Self.enqueueChunk) {
                        let chunk = indices[start..<min(start + Self.enqueueChunk, indices.count)]
                        var callKeys = [keys.pending, keys.scheduled, keys.stats, keys.recent]
                        var arguments = [
                            String(now), String(configuration.idempotencyTTL.milliseconds), queue, String(configuration.recentJobs),
                        ]
                        callKeys.reserveCapacity(4 + chunk.count * 4)
                        arguments.reserveCapacity(4 + chunk.count * 10)
                        for index in chunk {
                            let request = requests[index]
                            let jobKey = keys.job(ids[index])
                            let holder = holders[index] ?? ""
                            callKeys.append(jobKey)
                            callKeys.append(request.idempotencyKey.map(keys.idempotency) ?? jobKey)
                            callKeys.append(request.uniqueKey.map(keys.unique) ?? jobKey)
                            callKeys.append(holder.isEmpty ? jobKey : keys.job(holder))
                            let runAt = request.delay.map { $0 > .zero ? now + $0.milliseconds : 0 } ?? 0
                            arguments.append(contentsOf: [
                                ids[index], request.type, request.payload, String(request.maxAttempts), String(runAt),
                                request.idempotencyKey ?? "", request.uniqueKey ?? "", holder, request.label ?? "",
                                request.traceparent ?? "",
                            ])
                        }
                        calls.append((callKeys, arguments))
                        chunks.append(chunk)
                    }
                }
                try await register(seenQueues)
                let script = QueueScripts.enqueueScript(for: configuration.hashFormat)
                let replies = try await redis.runPipelined(script, calls: calls)
                for (chunk, reply) in zip(chunks, replies) {
                    let values: [RedisReply]
                    switch reply {
                    case .failure(let error):
                        if error.isRetryable && attempt < 3 {
                            retry += chunk
                            backOff = true
                        } else {
                            for index in chunk { outcomes[index] = .failure(error) }
                        }
                        continue
                    case .success(let value):
                        guard let array = value.array, array.count == chunk.count * 2 else {
                            let error = JobQueueError(.unexpectedReply, "enqueue returned a reply of the wrong shape")
                            for index in chunk { outcomes[index] = .failure(error) }
                            continue
                        }
                        values = array
                    }
                    for (offset, index) in chunk.enumerated() {
                        let id = values[offset * 2].string ?? ""
                        let outcome: EnqueueResult.Outcome
                        switch values[offset * 2 + 1].int {
                        case 1: outcome = .created
                        case 2: outcome = .conflict
                        case 3:
                            // The unique key is held by another job than the one named: name it.
                            holders[index] = id
                            if attempt < 8 {
                                retry.append(index)
                            } else {
                                outcomes[index] = .failure(
                                    JobQueueError(.unexpectedReply, "unique key \(requests[index].uniqueKey ?? "") kept changing"))
                            }
                            continue
                        default:
                            // Our own id from an earlier call whose reply was lost: created by us.
                            outcome = requests[index].id == nil && id == ids[index] ? .created : .existing
                        }
                        outcomes[index] = .success(EnqueueResult(id: id, outcome: outcome))
                        if outcome == .created {
                            metrics.forJob(queue: requests[index].queue, type: requests[index].type).enqueued.increment()
                        }
                    }
                }
            } catch {
                // Nothing was sent, or the connection broke with the calls' fate unknown:
                // send them again (same ids), a few times.
                let retryable = (error as? RedisError)?.isRetryable ?? false
                if retryable && attempt < 3 {
                    (retry, backOff) = (todo, true)
                } else {
                    for index in todo { outcomes[index] = .failure(error) }
                }
            }
            if backOff {
                logger.notice("enqueue: sending calls again", metadata: ["jobs": "\(retry.count)", "attempt": "\(attempt)"])
                try? await Task.sleep(for: .milliseconds(50 * attempt))
            }
            todo = retry
        }
        return await refusingDifferentRepeats(
            outcomes.map { $0 ?? .failure(JobQueueError(.unexpectedReply, "enqueue returned fewer jobs than it was given")) }, requests)
    }

    /// Adds queues to the registry, once per queue and process: discovery only, so outside
    /// the scripts (the registry has no queue's hash tag).
    private func register(_ queues: [String]) async throws {
        let new = queues.filter { queue in !registeredQueues.withLock { $0.contains(queue) } }
        guard !new.isEmpty else { return }
        try await redis.send(["SADD", QueueKeys.registry(prefix: configuration.prefix)] + new)
        registeredQueues.withLock { $0.formUnion(new) }
    }

    // MARK: Reading jobs

    /// The job with this id, looked up in `queue`, or in every known queue when `nil`.
    public func job(id: String, queue: String? = nil) async throws -> JobRecord? {
        let queues: [String]
        if let queue { queues = [queue] } else { queues = try await knownQueues() }
        guard !queues.isEmpty else { return nil }
        let replies = try await redis.pipeline(queues.map { ["HGETALL", configuration.keys($0).job(id)] })
        return zip(queues, replies).lazy.compactMap { JobRecord(fields: $1.fieldValues, id: id, queue: $0) }.first
    }

    /// What became of a job: its status, result and last error.
    public struct Outcome: Sendable, Hashable {
        public var status: JobStatus
        public var result: String?
        public var lastError: String?
    }

    /// The outcomes of the jobs with these ids in `queue`, in the same order (nil where a
    /// record is gone), read in pipelines of a thousand without their payloads.
    public func outcomes(ids: [String], queue: String) async throws -> [Outcome?] {
        let keys = configuration.keys(queue)
        var outcomes: [Outcome?] = []
        outcomes.reserveCapacity(ids.count)
        var start = 0
        while start < ids.count {
            let chunk = ids[start..<min(ids.count, start + 1000)]
            var read: [Outcome?] = try await redis.pipeline(chunk.map { ["HMGET", keys.job($0), "status", "result", "lastError", "type"] })
                .map { reply in
                    let values = reply.array ?? []
                    // No status but a type: queued (the third format leaves it out until the job starts).
                    guard values.count == 4, values[3].string != nil,
                        let status = JobStatus(rawValue: values[0].string ?? JobStatus.queued.rawValue)
                    else { return nil }
                    return Outcome(status: status, result: values[1].string, lastError: values[2].string)
                }
            // A packed result's other pieces, for those that have them.
            let packed = read.indices.filter { read[$0]?.result.map(StoredResult.isPacked) == true }
            if !packed.isEmpty {
                let pieces = Array(StoredResult.pieceFields.dropFirst())
                let replies = try await redis.pipeline(packed.map { ["HMGET", keys.job(chunk[chunk.startIndex + $0])] + pieces })
                for (index, reply) in zip(packed, replies) {
                    let values = reply.array ?? []
                    let first = read[index]?.result
                    read[index]?.result = StoredResult.result { name in
                        name == "result" ? first : pieces.firstIndex(of: name).flatMap { $0 < values.count ? values[$0].string : nil }
                    }
                }
            }
            outcomes += read
            start += chunk.count
        }
        return outcomes
    }

    /// The queues that producers and workers have used, sorted.
    /// The most recently enqueued jobs of `queue`, newest first (those whose records have
    /// expired are left out).
    public func recentJobs(queue: String, limit: Int = 50) async throws -> [JobRecord] {
        let keys = configuration.keys(queue)
        let ids = try await redis.send(["LRANGE", keys.recent, "0", String(max(0, limit - 1))]).array?.compactMap(\.string) ?? []
        guard !ids.isEmpty else { return [] }
        return try await records(ids, queue: queue)
    }

    /// The records of jobs of `queue`, in order, those gone left out.
    func records(_ ids: [String], queue: String) async throws -> [JobRecord] {
        let keys = configuration.keys(queue)
        let replies = try await redis.pipeline(ids.map { ["HGETALL", keys.job($0)] })
        return zip(ids, replies).compactMap { JobRecord(fields: $1.fieldValues, id: $0, queue: queue) }
    }

    public func knownQueues() async throws -> [String] {
        let reply = try await redis.send(["SMEMBERS", QueueKeys.registry(prefix: configuration.prefix)])
        return (reply.array ?? []).compactMap(\.string).sorted()
    }

    /// Counts for one queue, read in two round trips, and the Redis server that holds it. Reading them also sets the queue's
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
        // enqueuedAt, or createdAt where it is left out (the same time).
        if let oldest = first[3].string { second.append(["HMGET", keys.job(oldest), "enqueuedAt", "createdAt"]) }
        let more = second.isEmpty ? [] : try await redis.pipeline(second)
        let active = more.prefix(consumers.count).reduce(0) { $0 + ($1.int ?? 0) }
        var oldestAge: Double = 0
        if first[3].string != nil, let times = more.last?.array,
            let enqueuedAt = times.lazy.compactMap({ $0.string.flatMap(Int64.init) }).first
        {
            oldestAge = max(0, Double(Self.nowMilliseconds() - Int64(enqueuedAt)) / 1000)
        }
        let stats = QueueStats(
            name: queue, pending: first[0].int ?? 0, scheduled: first[1].int ?? 0, active: active,
            dead: first[2].int ?? 0, oldestPendingAgeSeconds: oldestAge, consumers: consumers.count,
            counters: first[4].fieldValues.compactMapValues { Int($0) },
            node: try await redis.server(forKey: keys.pending)
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
        return try await records(ids, queue: queue)
    }

    /// Sends dead jobs (all of them when `ids` is `nil`) back to pending with fresh attempts.
    @discardableResult
    public func retryDead(queue: String, ids: [String]? = nil) async throws -> Int {
        try await forDeadJobs(queue: queue, ids: ids) { keys, chunk in
            try await self.redis.run(
                QueueScripts.retryDead, keys: [keys.dead, keys.pending] + chunk.map(keys.job),
                arguments: [String(configuration.idempotencyTTL.milliseconds)] + chunk)
        }
    }

    /// Deletes dead jobs (all of them when `ids` is `nil`) and their records.
    @discardableResult
    public func purgeDead(queue: String, ids: [String]? = nil) async throws -> Int {
        try await forDeadJobs(queue: queue, ids: ids) { keys, chunk in
            try await self.redis.run(QueueScripts.purgeDead, keys: [keys.dead] + chunk.map(keys.job), arguments: chunk)
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
    /// - Parameter sparing: consumers known to be alive (the caller's own), left alone even
    ///   when their heartbeats look expired (after a long Redis pause, all of them do).
    @discardableResult
    public func reapExpiredConsumers(queue: String, sparing: Set<String> = []) async throws -> Int {
        let keys = configuration.keys(queue)
        let now = Self.nowMilliseconds()
        let expired = try await redis.send(["ZRANGEBYSCORE", keys.consumers, "-inf", String(now)]).array?.compactMap(\.string) ?? []
        var moved = 0
        for consumer in expired where !sparing.contains(consumer) {
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
        let active = keys.active(consumer)
        var moved = 0
        // The ids are read first (the script names every key it touches); ids claimed
        // meanwhile stay, and the next round (or the next reap) takes them.
        for _ in 0..<10 {
            let listed = try await redis.send(["LRANGE", active, "0", "999"]).array?.compactMap(\.string) ?? []
            let ids = Array(listed.reversed())
            let count =
                try await redis.run(
                    QueueScripts.release, keys: [keys.consumers, active, keys.pending, keys.stats] + ids.map(keys.job),
                    arguments: [consumer, String(Self.nowMilliseconds()), onlyIfExpired ? "1" : "0", onlyIfExpired ? "0" : "1"] + ids
                ).int ?? 0
            if count < 0 { return moved == 0 ? -1 : moved }
            moved += count
            if listed.count < 1000 && count == listed.count { break }
            if listed.isEmpty { break }
        }
        return moved
    }

    /// Applies the dead set's caps (count and age); returns how many records were removed.
    @discardableResult
    public func trimDeadJobs(queue: String) async throws -> Int {
        let keys = configuration.keys(queue)
        let oldest = Self.nowMilliseconds() - configuration.deadTTL.milliseconds
        let first = try await redis.pipeline([
            ["ZRANGEBYSCORE", keys.dead, "-inf", "(\(oldest)", "LIMIT", "0", "1000"], ["ZCARD", keys.dead],
        ])
        var ids = first[0].array?.compactMap(\.string) ?? []
        let over = (first[1].int ?? 0) - ids.count - configuration.deadMaxCount
        if over > 0 {
            let start = ids.count
            ids +=
                try await redis.send(["ZRANGE", keys.dead, String(start), String(start + min(over, 1000) - 1)]).array?.compactMap(\.string)
                ?? []
        }
        guard !ids.isEmpty else { return 0 }
        return try await purgeDead(queue: queue, ids: ids)
    }

    // MARK: Helpers

    static func nowMilliseconds() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// A random job id: 22 characters of the URL-safe base64 alphabet, about 132 random bits
    /// (a UUID has 122), the first a letter or digit. Shorter than 32 hex digits for more
    /// bits: an id is in its job's key, a queue's list and the recent list, so bytes count.
    static func makeID() -> String { makeIDs(1)[0] }

    /// `count` ids as `makeID` makes them, from the system's random source read 256 bytes at
    /// a time (`getentropy`, glibc 2.25 and later): a bulk enqueue asked the kernel three times
    /// per id, a fifth of its CPU.
    static func makeIDs(_ count: Int) -> [String] {
        var bytes = [UInt8](repeating: 0, count: idBytes * count)
        bytes.withUnsafeMutableBytes { raw in
            var filled = 0
            while filled < raw.count, let base = raw.baseAddress {
                let length = min(256, raw.count - filled)
                // Fails only for a length over 256 or a bad address, neither possible here.
                precondition(getentropy(base + filled, length) == 0, "the system's random source failed")
                filled += length
            }
        }
        return ids(from: bytes)
    }

    /// Random bytes per id: 17 hold its 22 six-bit characters (132 bits of 136).
    static let idBytes = 17

    /// One id per `idBytes` bytes: character `k` is bits `6k` to `6k + 5`, low bits first,
    /// of the id's bytes read as one little-endian number.
    static func ids(from bytes: [UInt8]) -> [String] {
        (0..<bytes.count / idBytes).map { index in
            let first = idBytes * index
            var id = [UInt8](repeating: 0, count: 22)
            for position in id.indices {
                let bit = position * 6
                let low = Int(bytes[first + bit / 8]) >> (bit % 8)
                let high = bit % 8 > 2 ? Int(bytes[first + bit / 8 + 1]) << (8 - bit % 8) : 0
                let six = (low | high) & 63
                // Never a leading "-" or "_": an id is given to command lines (`entitle jobs show ID`).
                id[position] = alphabet[position == 0 ? six % 62 : six]
            }
            return String(decoding: id, as: UTF8.self)
        }
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
}
