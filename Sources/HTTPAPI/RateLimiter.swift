import Foundation
import Synchronization

/// Token buckets, one per key (a publisher), in this process. Several API instances each
/// allow the rate: the limit protects the workers and Apple from one publisher's burst,
/// it is not billing.
final class RateLimiter: Sendable {
    struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let buckets = Mutex<[String: Bucket]>([:])

    /// Takes one token from `key`'s bucket; when it is empty, how long until one is back.
    func take(_ key: String, perSecond: Double, burst: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: Double(burst), updated: now)
            let elapsed = now - bucket.updated
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(Double(burst), bucket.tokens + seconds * perSecond)
            bucket.updated = now
            defer { buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return .milliseconds(Int64(((1 - bucket.tokens) / perSecond * 1000).rounded(.up)))
        }
    }
}
