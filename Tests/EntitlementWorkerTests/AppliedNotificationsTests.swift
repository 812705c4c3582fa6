import EntitleCore
import Foundation
import RedisClient
import RedisTestSupport
import Testing

/// Notification markers in generation sets, against a real redis-server.
@Suite struct AppliedNotificationsTests {
    let redis: RedisConnectionPool
    let prefix = TestRedis.uniquePrefix("applied")
    var keys: EntitlementKeys { EntitlementKeys(prefix: prefix) }
    var applied: AppliedNotifications { EntitlementStore(redis: redis, prefix: prefix, logger: TestRedis.logger).appliedNotifications }

    init() async throws { redis = try await TestRedis.pool() }

    static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A marker counts from its writing until 30 days after its generation's end, and its
    /// set lasts at least as long: checked against that reference at the edges and at
    /// random times, for many ids.
    @Test func aMarkerCountsForThirtyDaysAtLeastAndThirtyFiveAtMost() async throws {
        let day: Int64 = 86_400_000
        let g = AppliedNotifications.generation
        var random = SystemRandomNumberGenerator()
        for n in 0..<40 {
            let id = n % 2 == 0 ? UUID().uuidString : "v1:" + String(repeating: "ab", count: 32) + "\(n)"
            // Written at the real time (the set's expiry is on Redis's clock), read at other times.
            let written = Self.nowMs()
            try await applied.insert(publisher: "pub", notification: id, nowMs: written)
            let end = (written / g + 1) * g + 30 * day
            #expect(AppliedNotifications.countsUntil(writtenMs: written) == end)
            #expect(end - written > 30 * day && end - written <= 35 * day)
            #expect(try await applied.contains(publisher: "pub", notification: id, nowMs: written))
            // A reader whose clock is behind the writer's by a minute.
            #expect(try await applied.contains(publisher: "pub", notification: id, nowMs: written - 60_000))
            #expect(try await applied.contains(publisher: "pub", notification: id, nowMs: written + 30 * day))
            #expect(try await applied.contains(publisher: "pub", notification: id, nowMs: end - 1))
            #expect(try await !applied.contains(publisher: "pub", notification: id, nowMs: end))
            let later = written + Int64.random(in: 0..<(40 * day), using: &random)
            #expect(try await applied.contains(publisher: "pub", notification: id, nowMs: later) == (later < end))
            #expect(try await !applied.contains(publisher: "pub", notification: id + "x", nowMs: written))
            #expect(try await !applied.contains(publisher: "other", notification: id, nowMs: written))
        }
        // A writer whose clock is already in the next generation, read by one still in this.
        let next = (Self.nowMs() / g + 1) * g
        try await applied.insert(publisher: "pub", notification: "ahead", nowMs: next)
        #expect(try await applied.contains(publisher: "pub", notification: "ahead", nowMs: next - 60_000))
        #expect(try await applied.contains(publisher: "pub", notification: "ahead", nowMs: next - 1))
        #expect(try await applied.contains(publisher: "pub", notification: "ahead", nowMs: next))
        // No key per notification: sets of the publisher's buckets, each expiring as the
        // reference says, a minute later per bucket.
        let written = try await redis.send(["KEYS", "\(prefix):*"]).array?.compactMap(\.string) ?? []
        #expect(!written.isEmpty && written.count <= 41 && written.allSatisfy { $0.contains(":ent:pub:applied:{pub/applied-") })
        for key in written {
            let generation = try #require(Int64(key.split(separator: ":").last ?? ""))
            let bucket = try #require(key.split(separator: "applied-").last?.prefix(2))
            let expiresAt = try await redis.send(["PEXPIRETIME", key]).int ?? 0
            #expect(Int64(expiresAt) == (generation + 1) * g + 30 * day + Int64(Int(bucket, radix: 16) ?? -1) * 60_000, "\(key)")
            #expect(try await redis.send(["TYPE", key]).string == "set")
        }
    }

    /// A marker written by the version before, a key of its own, still counts; so does one
    /// written through the store's own calls.
    @Test func oldMarkersAndTheStoresCallsCount() async throws {
        let store = EntitlementStore(redis: redis, prefix: prefix, logger: TestRedis.logger)
        _ = try await redis.send(["SET", keys.notification("pub", "old-uuid"), "1", "EX", "60"])
        #expect(try await store.wasApplied(publisher: "pub", notification: "old-uuid"))
        #expect(try await !store.wasApplied(publisher: "pub", notification: "new-uuid"))
        try await store.markApplied(publisher: "pub", notification: "new-uuid")
        #expect(try await store.wasApplied(publisher: "pub", notification: "new-uuid"))
        #expect(try await redis.send(["EXISTS", keys.notification("pub", "new-uuid")]).int == 0)
    }
}
