import Foundation
import RedisClient

/// Which notifications count as applied, kept compact: a notification's marker is 22
/// characters of a digest of its id in one of 256 sets per publisher and generation of five
/// days, instead of a key of its own (about 70 bytes of Redis at scale instead of about 180:
/// a key's name, its value, and its entries in the keyspace and the expiry table).
///
/// A marker is written into the current generation's set, and counts until 30 days after
/// that generation's end: at least 30 days, at most 35. A lookup reads the sets of the
/// generations that may hold such a marker, and the next one (a writer whose clock is ahead
/// may have written there). A set expires when its markers stop counting, the 256 sets of a
/// generation a minute apart, so that no moment frees them all. Markers written as keys of
/// their own by versions before this one (`ent:P:notification:N`, 30 days) are still read
/// until they expire.
package struct AppliedNotifications: Sendable {
    let redis: RedisConnectionPool
    let keys: EntitlementKeys

    /// How long one set takes markers.
    package static let generation: Int64 = 5 * 86_400_000
    /// How long after its generation's end a marker counts.
    package static let retention: Int64 = 30 * 86_400_000
    /// How much later than the one before each of a generation's sets expires.
    package static let expiryStagger: Int64 = 60_000

    /// The set a notification id's marker is in (by generation) and the marker: 8 bits of
    /// the digest name one of 256 sets, 88 more are the marker, in 22 characters (Redis
    /// keeps a member that short in 24 bytes).
    private static func place(of id: String) -> (bucket: String, member: String) {
        let digest = SHA256Hex.of(id, bytes: 12)
        return (String(digest.prefix(2)), String(digest.suffix(22)))
    }

    /// When a marker written at `writtenMs` stops counting.
    package static func countsUntil(writtenMs: Int64) -> Int64 { (writtenMs / generation + 1) * generation + retention }

    /// When the set of `bucket` (two hex digits) for the generation of `writtenMs` expires.
    package static func setExpiry(writtenMs: Int64, bucket: String) -> Int64 {
        countsUntil(writtenMs: writtenMs) + Int64(Int(bucket, radix: 16) ?? 0) * expiryStagger
    }

    /// Whether the notification was marked applied and still counts.
    package func contains(publisher: String, notification id: String, nowMs: Int64) async throws -> Bool {
        let (bucket, member) = Self.place(of: id)
        let current = nowMs / Self.generation
        let oldest = (nowMs - Self.retention) / Self.generation
        var commands = (oldest...(current + 1)).map {
            ["SISMEMBER", keys.appliedNotifications(publisher, bucket: bucket, generation: $0), member]
        }
        commands.append(["EXISTS", keys.notification(publisher, id)])
        return try await redis.pipeline(commands).contains { $0.int == 1 }
    }

    /// Marks the notification applied.
    package func insert(publisher: String, notification id: String, nowMs: Int64) async throws {
        let (bucket, member) = Self.place(of: id)
        let key = keys.appliedNotifications(publisher, bucket: bucket, generation: nowMs / Self.generation)
        let expiresAt = Self.setExpiry(writtenMs: nowMs, bucket: bucket)
        _ = try await redis.run(Self.mark, keys: [key], arguments: [member, String(expiresAt)])
    }

    /// Adds the marker and sets the set's expiry in one step, so no set is left without one.
    /// KEYS: the set. ARGV: the marker, when the set expires (ms since 1970).
    static let mark = RedisScript(
        name: "notification-applied",
        source: """
            redis.call('SADD', KEYS[1], ARGV[1])
            redis.call('PEXPIREAT', KEYS[1], ARGV[2])
            return 1
            """)
}
