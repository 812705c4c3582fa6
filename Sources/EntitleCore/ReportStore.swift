import Entitlements
import Foundation
import RedisClient
import Reporting

/// The reports kept from the event log, per publisher, in one Redis Cluster slot (hash tag
/// `{P}`), under a generation (`g1`, `g2`, ...) so that a rebuild can fill a new one beside
/// the one in use and take its place:
///
/// - `{prefix}:rep:{P}:generation`: string, the generation in use (1 when absent)
/// - `{prefix}:rep:{P}:gN:t:METRIC:YYYYMM`: hash `dd|currency` -> each day's total
/// - `{prefix}:rep:{P}:gN:d:METRIC:YYYYMMDD`: hash `product|offer|storefront|currency` -> the day's figure
/// - `{prefix}:rep:{P}:gN:m:METRIC:YYYYMM`: the same fields, the month's figure
/// - `{prefix}:rep:{P}:gN:sb:t:...`, `...:sb:d:...`, `...:sb:m:...`: the same for sandbox purchases
/// - `{prefix}:rep:{P}:gN:cursor`: hash partition -> the last event-log entry folded in
/// - `{prefix}:rep:{P}:gN:meta`: hash `firstMonth`
/// - `{prefix}:rep:{P}:lease:gN`: string, the process folding the publisher's log (a lease)
///
/// Folding is exactly once: increments and the partition's new cursor are written by one
/// script, only if the cursor is still where the folder read from.
package struct ReportStore: Sendable {
    package let redis: RedisConnectionPool
    package let prefix: String

    package init(redis: RedisConnectionPool, prefix: String) {
        self.redis = redis
        self.prefix = prefix
    }

    func base(_ publisher: String) -> String { "\(prefix):rep:{\(publisher)}" }
    func generationKey(_ publisher: String) -> String { base(publisher) + ":generation" }
    func key(_ publisher: String, generation: Int, _ suffix: String) -> String { base(publisher) + ":g\(generation):" + suffix }

    func key(_ publisher: String, generation: Int, bucket: ReportBucket) -> String {
        let report = bucket.environment == .sandbox ? "sb:" : ""
        return switch bucket {
        case .totals(let month, let metric, _): key(publisher, generation: generation, report + "t:\(metric.rawValue):\(month)")
        case .day(let day, let metric, _): key(publisher, generation: generation, report + "d:\(metric.rawValue):\(day.value)")
        case .month(let month, let metric, _): key(publisher, generation: generation, report + "m:\(metric.rawValue):\(month)")
        }
    }

    /// The generation in use.
    package func generation(_ publisher: String) async throws -> Int {
        try await redis.send(["GET", generationKey(publisher)]).string.flatMap { Int($0) } ?? 1
    }

    /// The last entry of each partition folded into a generation (`"0"`: none).
    package func cursors(_ publisher: String, generation: Int) async throws -> [String] {
        let reply = try await redis.send(["HGETALL", key(publisher, generation: generation, "cursor")])
        let flat = (reply.array ?? []).compactMap(\.string)
        var cursors = Array(repeating: "0", count: EntitlementKeys.partitions)
        for index in stride(from: 0, to: flat.count - 1, by: 2) {
            if let partition = Int(flat[index]), cursors.indices.contains(partition) { cursors[partition] = flat[index + 1] }
        }
        return cursors
    }

    /// Adds increments and moves a partition's cursor from `expected` to `cursor`, in one
    /// script; nothing when the cursor has moved meanwhile (another folder got there first).
    static let apply = RedisScript(
        name: "reports-apply",
        source: """
            local current = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
            if current ~= ARGV[2] then return 0 end
            redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
            local i = 5
            for k = 4, #KEYS do
              redis.call('SADD', KEYS[3], KEYS[k])
              local count = tonumber(ARGV[i])
              i = i + 1
              for _ = 1, count do
                if redis.call('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1]) == 0 then redis.call('HDEL', KEYS[k], ARGV[i]) end
                i = i + 2
              end
            end
            if ARGV[4] ~= '' then
              local known = redis.call('HGET', KEYS[2], 'firstMonth')
              if not known or tonumber(ARGV[4]) < tonumber(known) then redis.call('HSET', KEYS[2], 'firstMonth', ARGV[4]) end
            end
            return 1
            """)

    /// Folds entries into a generation: returns whether the write went through.
    package func apply(
        _ buckets: [ReportBucket: [String: Int64]], publisher: String, generation: Int, partition: Int, from expected: String,
        to cursor: String
    ) async throws -> Bool {
        var keys = [
            key(publisher, generation: generation, "cursor"), key(publisher, generation: generation, "meta"),
            key(publisher, generation: generation, "index"),
        ]
        var arguments = [String(partition), expected, cursor]
        let firstMonth = buckets.keys.map(\.month).min()
        arguments.append(firstMonth.map(String.init) ?? "")
        // In key order, so the same increments always make the same script call.
        for (name, fields) in buckets.map({ (key(publisher, generation: generation, bucket: $0.key), $0.value) }).sorted(by: { $0.0 < $1.0 }
        ) {
            keys.append(name)
            arguments.append(String(fields.count))
            for (field, value) in fields { arguments += [field, String(value)] }
        }
        return try await redis.run(Self.apply, keys: keys, arguments: arguments).int == 1
    }

    /// Takes (or renews) the lease on folding a publisher's log into a generation for `holder`;
    /// false when another holds it.
    package func lease(_ publisher: String, generation: Int, holder: String, for duration: Duration) async throws -> Bool {
        let key = base(publisher) + ":lease:g\(generation)"
        let milliseconds = String(max(1, duration.components.seconds * 1000))
        if try await redis.send(["SET", key, holder, "NX", "PX", milliseconds]).string == "OK" { return true }
        guard try await redis.send(["GET", key]).string == holder else { return false }
        _ = try await redis.send(["PEXPIRE", key, milliseconds])
        return true
    }

    /// Makes a generation the one in use.
    package func use(_ publisher: String, generation: Int) async throws {
        _ = try await redis.send(["SET", generationKey(publisher), String(generation)])
    }

    /// Every bucket key of a generation (kept in its index by `apply`: no scan, Cluster or not).
    package func bucketKeys(_ publisher: String, generation: Int) async throws -> [String] {
        (try await redis.send(["SMEMBERS", key(publisher, generation: generation, "index")]).array ?? []).compactMap(\.string).sorted()
    }

    /// Every figure of a generation, by bucket key with the generation taken out (`d:20261125`).
    package func figures(_ publisher: String, generation: Int) async throws -> [String: [String: Int64]] {
        let keys = try await bucketKeys(publisher, generation: generation)
        guard !keys.isEmpty else { return [:] }
        let replies = try await redis.pipeline(keys.map { ["HGETALL", $0] })
        let stem = key(publisher, generation: generation, "")
        var figures: [String: [String: Int64]] = [:]
        for (key, reply) in zip(keys, replies) {
            let flat = (reply.array ?? []).compactMap(\.string)
            var fields: [String: Int64] = [:]
            for index in stride(from: 0, to: flat.count - 1, by: 2) { fields[flat[index]] = Int64(flat[index + 1]) ?? 0 }
            if !fields.isEmpty { figures[String(key.dropFirst(stem.count))] = fields }
        }
        return figures
    }

    /// Drops a generation's keys.
    package func drop(_ publisher: String, generation: Int) async throws {
        let keys = try await bucketKeys(publisher, generation: generation)
        for key in keys { _ = try await redis.send(["UNLINK", key]) }
        for suffix in ["cursor", "meta", "index"] { _ = try await redis.send(["UNLINK", key(publisher, generation: generation, suffix)]) }
    }

    /// A generation's figures as a report reads them.
    package func source(_ publisher: String, generation: Int) -> Source {
        Source(store: self, publisher: publisher, generation: generation)
    }

    /// A publisher's figures for `ReportQuery`: one pipelined read of the buckets asked for.
    package struct Source: ReportSource {
        let store: ReportStore
        let publisher: String
        let generation: Int

        package func fields(of buckets: [ReportBucket]) async throws -> [[String: Int64]] {
            guard !buckets.isEmpty else { return [] }
            let replies = try await store.redis.pipeline(
                buckets.map { ["HGETALL", store.key(publisher, generation: generation, bucket: $0)] })
            return replies.map { reply in
                let flat = (reply.array ?? []).compactMap(\.string)
                var fields: [String: Int64] = [:]
                for index in stride(from: 0, to: flat.count - 1, by: 2) { fields[flat[index]] = Int64(flat[index + 1]) ?? 0 }
                return fields
            }
        }

        package func firstMonth() async throws -> Int? {
            try await store.redis.send(["HGET", store.key(publisher, generation: generation, "meta"), "firstMonth"]).string.flatMap {
                Int($0)
            }
        }
    }
}
