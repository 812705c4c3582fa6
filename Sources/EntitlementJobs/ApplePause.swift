import AppStore
import EntitleCore
import Foundation
import JobQueue
import Synchronization

/// Apple's rate limits are the whole publisher's (per app and endpoint, enforced hourly):
/// when Apple answers 429 with `Retry-After`, every job of the publisher that asks Apple
/// waits until then, in every worker process, not only the job that met it. The pause is a
/// Redis key (`{prefix}:ent:P:apple:pause`, expiring at its end) read at most once a second
/// per publisher and process, so a job pays no round trip for it.
package final class ApplePause: Sendable {
    let store: EntitlementStore
    /// Per publisher: until when Apple said to wait (nil: not paused), and when Redis was read.
    private let known = Mutex<[String: (until: Date?, read: ContinuousClock.Instant)]>([:])
    /// How stale a process's view of another process's pause may be.
    static let refresh: Duration = .seconds(1)
    /// The wait when Apple says 429 without `Retry-After`.
    static let defaultWait: TimeInterval = 60

    package init(store: EntitlementStore) { self.store = store }

    /// How long the publisher's jobs must still wait, if they must.
    func remaining(_ publisher: String) async throws -> Duration? {
        let now = ContinuousClock.now
        let cached = known.withLock { $0[publisher] }
        var until = cached?.until
        if cached.map({ now - $0.read > Self.refresh }) ?? true {
            let milliseconds = try await store.applePauseRemaining(publisher: publisher)
            until = milliseconds > 0 ? Date().addingTimeInterval(Double(milliseconds) / 1000) : nil
            known.withLock { $0[publisher] = (until, now) }
        }
        guard let until, until > Date() else { return nil }
        return .milliseconds(Int64(until.timeIntervalSinceNow * 1000) + 1)
    }

    /// A failed call whose error a job goes on without: when it is Apple's 429, the
    /// publisher's other calls wait as if the job had failed with it.
    func pause(_ publisher: String, after error: AppStoreError) async {
        guard error.code == .rateLimited else { return }
        try? await pause(publisher, until: error.retryAfter)
    }

    /// Apple said 429: the publisher waits until `until` (its `Retry-After`, a day at most).
    func pause(_ publisher: String, until retryAfter: Date?) async throws {
        let until = min(retryAfter ?? Date().addingTimeInterval(Self.defaultWait), Date().addingTimeInterval(86_400))
        let milliseconds = Int64(until.timeIntervalSinceNow * 1000)
        guard milliseconds > 0 else { return }
        try await store.extendApplePause(
            publisher: publisher, untilMs: Int64(until.timeIntervalSince1970 * 1000), remainingMs: milliseconds)
        known.withLock { $0[publisher] = (until, ContinuousClock.now) }
    }
}
