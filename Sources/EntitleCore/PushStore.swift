import APNs
import AppStore
import DurationUnits
import Foundation
import JobQueue
import RedisClient

/// Pushes in Redis: each push's record, its audience (fixed once found, so a rerun sends the
/// same batches), every device's result and the batches done, all under the push's hash tag
/// and kept `retention` (seven days).
package struct PushStore: Sendable {
    /// A device's result, as `GET /v1/pushes/{id}` reports it.
    package enum Result: String, Sendable, Hashable, Codable, CaseIterable {
        /// APNs accepted it.
        case sent
        /// APNs refused it for this device (or for the push), or it was given up on.
        case refused
        /// Not sent yet, or to be sent again (APNs asked to wait or failed).
        case pending
        /// Being sent by a worker right now.
        case inFlight
        /// The worker stopped while APNs had it; not sent again, so no device gets a push
        /// twice, and its delivery is not known.
        case unconfirmed

        /// Whether a later attempt leaves it as it is.
        package var isFinal: Bool { self == .sent || self == .refused || self == .unconfirmed }
    }

    /// One device's line in a push's results.
    package struct DeviceResult: Sendable, Hashable, Codable {
        package var token: String
        package var customer: String
        package var result: Result
        package var reason: String?
        /// The attempt's lease that marked it in flight (to tell a crashed attempt's marks).
        package var attempt: String?

        package init(token: String, customer: String, result: Result, reason: String? = nil, attempt: String? = nil) {
            self.token = token
            self.customer = customer
            self.result = result
            self.reason = reason
            self.attempt = attempt
        }
    }

    /// A push as stored.
    package struct Record: Sendable, Hashable {
        package var id: String
        package var request: PushRequest
        /// `queued`, `sending`, `finished`, `failed`.
        package var status: String
        package var error: String?
        package var createdAt: Int64
        package var finishedAt: Int64?
        package var audienceSize: Int?
        package var batches: Int?
        package var batchesDone: Int
        /// Devices by result.
        package var counts: [Result: Int]
        /// Customers in the audience who were no longer entitled when their batch was sent.
        package var lapsed: Int
        /// The digest of the request as posted (an idempotency key reused with another body is refused).
        package var digest: String
    }

    let redis: RedisConnectionPool
    let keys: EntitlementKeys
    package var retention: Duration = .seconds(7 * 86_400)

    package init(redis: RedisConnectionPool, keys: EntitlementKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Creates the record unless it exists; returns the stored digest (the caller's when created).
    static let create = RedisScript(
        name: "push-create",
        source: """
            local digest = redis.call('HGET', KEYS[1], 'digest')
            if digest then return digest end
            redis.call('HSET', KEYS[1], 'request', ARGV[1], 'digest', ARGV[2], 'status', 'queued', 'createdAt', ARGV[3])
            redis.call('PEXPIRE', KEYS[1], ARGV[4])
            return ARGV[2]
            """)

    /// Creates the push's record; `false` when a push with this id exists with another request.
    package func create(publisher: String, id: String, request: PushRequest, digest: String, now: Int64) async throws -> Bool {
        let json = String(decoding: try JSONEncoder.sorted.encode(request), as: UTF8.self)
        let stored = try await redis.run(
            Self.create, keys: [keys.push(publisher, id)], arguments: [json, digest, String(now), String(retention.milliseconds)])
        return stored.string == digest
    }

    /// Keeps the push and queues its fan-out (`push` job, one per push): what the API and
    /// `entitle push` both do. With an idempotency key the push id is derived from it, and a
    /// repeat returns the same push; `nil` when the key was used for another request.
    package func submit(
        _ request: PushRequest, publisher: String, idempotencyKey: String?, jobQueue: JobQueue, queue: String
    ) async throws -> String? {
        let canonical = String(decoding: try JSONEncoder.sorted.encode(request), as: UTF8.self)
        let id = idempotencyKey.map { SHA256Hex.of("push\n\(publisher)\n\($0)", bytes: 16) } ?? UUID().uuidString.lowercased()
        let now = AppleTimestamp(Date()).milliseconds
        guard try await create(publisher: publisher, id: id, request: request, digest: SHA256Hex.of(canonical, bytes: 16), now: now) else {
            return nil
        }
        let payload = JobPayloads.Push(publisher: publisher, pushId: id)
        // A conflict is this push's fan-out already queued: nothing more to do.
        _ = try await jobQueue.enqueue(try EnqueueRequest(payload, queue: queue, uniqueKey: payload.uniqueKey))
        return id
    }

    package func record(publisher: String, id: String) async throws -> Record? {
        let fields = try await redis.send(["HGETALL", keys.push(publisher, id)]).fieldValues
        guard let json = fields["request"], let request = try? JSONDecoder().decode(PushRequest.self, from: Data(json.utf8)) else {
            return nil
        }
        let done = try await redis.send(["SCARD", keys.push(publisher, id, ":batches")]).int ?? 0
        var counts: [Result: Int] = [:]
        for result in Result.allCases { counts[result] = fields["count:" + result.rawValue].flatMap { Int($0) } ?? 0 }
        return Record(
            id: id, request: request, status: fields["status"] ?? "queued", error: fields["error"],
            createdAt: fields["createdAt"].flatMap { Int64($0) } ?? 0, finishedAt: fields["finishedAt"].flatMap { Int64($0) },
            audienceSize: fields["audience"].flatMap { Int($0) }, batches: fields["batches"].flatMap { Int($0) }, batchesDone: done,
            counts: counts, lapsed: fields.filter { $0.key.hasPrefix("lapsed:") }.values.compactMap { Int($0) }.reduce(0, +),
            digest: fields["digest"] ?? "")
    }

    /// Fixes the audience once: `ARGV[1]` batch size, `ARGV[2]` retention ms, `ARGV[3]` now,
    /// then the customers. Returns {audience size, batches} as first fixed.
    static let fixAudience = RedisScript(
        name: "push-fix-audience",
        source: """
            local size = redis.call('HGET', KEYS[1], 'audience')
            if size then return {tonumber(size), tonumber(redis.call('HGET', KEYS[1], 'batches'))} end
            redis.call('DEL', KEYS[2])
            for i = 4, #ARGV, 5000 do
              redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
            end
            local count = #ARGV - 3
            local batches = math.ceil(count / tonumber(ARGV[1]))
            redis.call('HSET', KEYS[1], 'audience', count, 'batches', batches, 'status', 'sending')
            if count > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
            if batches == 0 then redis.call('HSET', KEYS[1], 'status', 'finished', 'finishedAt', ARGV[3]) end
            return {count, batches}
            """)

    /// The audience as first fixed (a rerun gets the same), and its number of batches.
    package func fixAudience(publisher: String, id: String, customers: [String], batchSize: Int) async throws -> (size: Int, batches: Int) {
        let reply = try await redis.run(
            Self.fixAudience, keys: [keys.push(publisher, id), keys.push(publisher, id, ":audience")],
            arguments: [
                String(batchSize), String(retention.milliseconds), String(AppleTimestamp(Date()).milliseconds),
            ]
                + customers)
        let values = reply.array?.compactMap(\.int) ?? []
        guard values.count == 2 else { throw EntitlementStoreError(.unreadable, "push \(id)'s audience cannot be fixed") }
        return (values[0], values[1])
    }

    /// Customers `start..<end` of the audience.
    package func audience(publisher: String, id: String, range: Range<Int>) async throws -> [String] {
        guard !range.isEmpty else { return [] }
        let reply = try await redis.send([
            "LRANGE", keys.push(publisher, id, ":audience"), String(range.lowerBound), String(range.upperBound - 1),
        ])
        return reply.array?.compactMap(\.string) ?? []
    }

    /// The results recorded for these tokens.
    package func results(publisher: String, id: String, tokens: [String]) async throws -> [String: DeviceResult] {
        guard !tokens.isEmpty else { return [:] }
        let reply = try await redis.send(["HMGET", keys.push(publisher, id, ":results")] + tokens)
        var results: [String: DeviceResult] = [:]
        let decoder = JSONDecoder()
        for (token, value) in zip(tokens, reply.array ?? []) {
            guard let json = value.string, let result = try? decoder.decode(DeviceResult.self, from: Data(json.utf8)) else { continue }
            results[token] = result
        }
        return results
    }

    /// Writes results (`ARGV[1]` retention, then token, result name, JSON triples), moving
    /// the record's counts from each token's previous result to its new one.
    static let setResults = RedisScript(
        name: "push-set-results",
        source: """
            for i = 2, #ARGV, 3 do
              local old = redis.call('HGET', KEYS[2], ARGV[i])
              if old then
                local ok, decoded = pcall(cjson.decode, old)
                if ok and decoded.result then redis.call('HINCRBY', KEYS[1], 'count:' .. decoded.result, -1) end
              end
              redis.call('HINCRBY', KEYS[1], 'count:' .. ARGV[i + 1], 1)
              redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
            end
            redis.call('PEXPIRE', KEYS[2], ARGV[1])
            return 1
            """)

    /// Claims devices for sending (`ARGV[1]` this run's mark, `ARGV[2]` retention, then token
    /// and customer pairs): a device with no result or `pending` is marked in flight for this
    /// run and returned; one in flight for another run (a worker that died, or one still
    /// sending) becomes `unconfirmed`, never sent twice; a final result stays.
    static let claimForSending = RedisScript(
        name: "push-claim-for-sending",
        source: """
            local claimed = {}
            for i = 3, #ARGV, 2 do
              local token, customer = ARGV[i], ARGV[i + 1]
              local old = redis.call('HGET', KEYS[2], token)
              local previous = nil
              if old then
                local ok, decoded = pcall(cjson.decode, old)
                if ok then previous = decoded end
              end
              local state = previous and previous.result or nil
              local next = nil
              if state == nil or state == 'pending' then
                next = {token = token, customer = customer, result = 'inFlight', attempt = ARGV[1]}
                table.insert(claimed, token)
              elseif state == 'inFlight' and previous.attempt ~= ARGV[1] then
                next = {token = token, customer = customer, result = 'unconfirmed', reason = 'another run had it in flight (a worker stopped, or is still sending)'}
              end
              if next then
                if state then redis.call('HINCRBY', KEYS[1], 'count:' .. state, -1) end
                redis.call('HINCRBY', KEYS[1], 'count:' .. next.result, 1)
                redis.call('HSET', KEYS[2], token, cjson.encode(next))
              end
            end
            redis.call('PEXPIRE', KEYS[2], ARGV[2])
            return claimed
            """)

    /// Marks the devices this run may send to (see `claimForSending`); their tokens.
    package func claimForSending(
        publisher: String, id: String, run: String, devices: [(token: String, customer: String)]
    ) async throws -> Set<String> {
        guard !devices.isEmpty else { return [] }
        let reply = try await redis.run(
            Self.claimForSending, keys: [keys.push(publisher, id), keys.push(publisher, id, ":results")],
            arguments: [run, String(retention.milliseconds)] + devices.flatMap { [$0.token, $0.customer] })
        return Set(reply.array?.compactMap(\.string) ?? [])
    }

    package func setResults(publisher: String, id: String, _ results: [DeviceResult]) async throws {
        guard !results.isEmpty else { return }
        var arguments = [String(retention.milliseconds)]
        for result in results {
            arguments += [result.token, result.result.rawValue, String(decoding: try JSONEncoder.sorted.encode(result), as: UTF8.self)]
        }
        _ = try await redis.run(
            Self.setResults, keys: [keys.push(publisher, id), keys.push(publisher, id, ":results")], arguments: arguments)
    }

    /// Records batch `ARGV[1]` done with `ARGV[2]` lapsed customers; the push is finished
    /// when every batch is (`ARGV[3]` now, `ARGV[4]` retention). Returns 1 when it finished.
    static let finishBatch = RedisScript(
        name: "push-finish-batch",
        source: """
            redis.call('SADD', KEYS[2], ARGV[1])
            redis.call('PEXPIRE', KEYS[2], ARGV[4])
            redis.call('HSET', KEYS[1], 'lapsed:' .. ARGV[1], ARGV[2])
            local total = tonumber(redis.call('HGET', KEYS[1], 'batches') or '-1')
            if redis.call('SCARD', KEYS[2]) >= total and redis.call('HGET', KEYS[1], 'status') == 'sending' then
              redis.call('HSET', KEYS[1], 'status', 'finished', 'finishedAt', ARGV[3])
              return 1
            end
            return 0
            """)

    package func finishBatch(publisher: String, id: String, batch: Int, lapsed: Int, now: Int64) async throws -> Bool {
        try await redis.run(
            Self.finishBatch, keys: [keys.push(publisher, id), keys.push(publisher, id, ":batches")],
            arguments: [String(batch), String(lapsed), String(now), String(retention.milliseconds)]
        ).int == 1
    }

    /// The push failed for every device (APNs refused its key, topic or payload).
    package func fail(publisher: String, id: String, reason: String, now: Int64) async throws {
        _ = try await redis.send(["HSET", keys.push(publisher, id), "status", "failed", "error", reason, "finishedAt", String(now)])
    }

    /// A page of device results: from `cursor` (HSCAN's), about `count` of them; the next
    /// cursor, "0" at the end.
    package func deviceResults(
        publisher: String, id: String, cursor: String, count: Int
    ) async throws -> (
        results: [DeviceResult], next: String
    ) {
        let reply = try await redis.send(["HSCAN", keys.push(publisher, id, ":results"), cursor, "COUNT", String(count)])
        guard let parts = reply.array, parts.count == 2, let next = parts[0].string, let items = parts[1].array else { return ([], "0") }
        var results: [DeviceResult] = []
        let decoder = JSONDecoder()
        for index in stride(from: 1, to: items.count, by: 2) {
            guard let json = items[index].string, let result = try? decoder.decode(DeviceResult.self, from: Data(json.utf8)) else {
                continue
            }
            results.append(result)
        }
        return (results.sorted { $0.token < $1.token }, next)
    }
}
