import DurationUnits
import Foundation
import Synchronization

/// Token buckets, one per key (a publisher, an app, a client address), in this process.
/// Several API instances each allow the rate: the limit protects the workers and Apple from
/// one caller's burst, it is not billing.
final class RateLimiter: Sendable {
    struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let buckets = Mutex<[String: Bucket]>([:])
    /// Beyond this many keys, buckets that have refilled (they hold nothing a new one would
    /// not) are forgotten: keys from many client addresses cannot grow the table for ever.
    let maximumKeys: Int

    init(maximumKeys: Int = 10_000) { self.maximumKeys = maximumKeys }

    /// Takes one token from `key`'s bucket; when it is empty, how long until one is back.
    func take(_ key: String, perSecond: Double, burst: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            var bucket = Self.refilled(buckets[key], perSecond: perSecond, burst: burst, now: now)
            defer {
                buckets[key] = bucket
                if buckets.count > maximumKeys { Self.forgetFull(&buckets, perSecond: perSecond, burst: burst, now: now) }
            }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return Self.delay(bucket, perSecond: perSecond)
        }
    }

    /// How long until `key`'s bucket holds a token again; `nil` when it holds one now.
    /// Takes nothing.
    func wait(_ key: String, perSecond: Double, burst: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            let bucket = Self.refilled(buckets[key], perSecond: perSecond, burst: burst, now: now)
            return bucket.tokens >= 1 ? nil : Self.delay(bucket, perSecond: perSecond)
        }
    }

    /// Until the bucket holds a token, an hour at most.
    private static func delay(_ bucket: Bucket, perSecond: Double) -> Duration {
        .milliseconds(Int64(min(3_600_000, ((1 - bucket.tokens) / perSecond * 1000).rounded(.up))))
    }

    private static func refilled(_ bucket: Bucket?, perSecond: Double, burst: Int, now: ContinuousClock.Instant) -> Bucket {
        guard var bucket else { return Bucket(tokens: Double(burst), updated: now) }
        let elapsed = now - bucket.updated
        let seconds = elapsed.seconds
        bucket.tokens = min(Double(burst), bucket.tokens + max(0, seconds) * perSecond)
        bucket.updated = now
        return bucket
    }

    private static func forgetFull(_ buckets: inout [String: Bucket], perSecond: Double, burst: Int, now: ContinuousClock.Instant) {
        buckets = buckets.filter { refilled($0.value, perSecond: perSecond, burst: burst, now: now).tokens < Double(burst) }
    }
}
