import Foundation
import RedisClient

/// Which notifications count as applied, kept compact: a notification's marker is 22
/// characters of a digest of its id in one of 16 sets per generation of five days,
/// instead of a key of its own (about 60 bytes of Redis instead of about 200: a key's
/// name, its value, and its entries in the keyspace and the expiry table).
///
/// A marker is written into the current generation's set; a set expires when its newest
/// marker is 30 days old (its generation's end plus 30 days), and a lookup reads the last
/// seven generations' sets: a marker counts for at least 30 days and at most 35. Markers
/// written as keys of their own by versions before this one (`ent:P:notification:N`, 30
/// days) are still read until they expire.
package struct AppliedNotifications: Sendable {
    let redis: RedisConnectionPool
    let keys: EntitlementKeys

    /// How long one set takes markers.
    package static let generation: Int64 = 5 * 86_400_000
    /// How long a marker counts at least.
    package static let retention: Int64 = 30 * 86_400_000
    /// The generations a lookup reads: the current one and those whose sets may hold a
    /// marker written within `retention`.
    static let generationsRead = Int(retention / generation) + 1

    /// The set a notification id's marker is in (by generation), and the marker: 88 bits
    /// of the digest, 22 characters (Redis keeps a member that short in 24 bytes).
    private static func place(of id: String) -> (bucket: String, member: String) {
        let digest = SHA256Hex.of(id, bytes: 12)
        return (String(digest.prefix(1)), String(digest.suffix(22)))
    }

    /// Whether the notification was marked applied within `retention`.
    package func contains(publisher: String, notification id: String, nowMs: Int64) async throws -> Bool {
        let (bucket, member) = Self.place(of: id)
        let current = nowMs / Self.generation
        var commands = (0..<Int64(Self.generationsRead)).map {
            ["SISMEMBER", keys.appliedNotifications(publisher, bucket: bucket, generation: current - $0), member]
        }
        commands.append(["EXISTS", keys.notification(publisher, id)])
        return try await redis.pipeline(commands).contains { $0.int == 1 }
    }

    /// Marks the notification applied.
    package func insert(publisher: String, notification id: String, nowMs: Int64) async throws {
        let (bucket, member) = Self.place(of: id)
        let generation = nowMs / Self.generation
        let key = keys.appliedNotifications(publisher, bucket: bucket, generation: generation)
        let expiresAt = (generation + 1) * Self.generation + Self.retention
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
