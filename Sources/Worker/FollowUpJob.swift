import AppStore
import Foundation

/// A job a change makes necessary (a webhook, the next renewal check), written into the
/// customer's outbox together with the change and enqueued after it, with `id` as its
/// idempotency key: a crash between the write and the enqueue loses nothing, and a rerun
/// enqueues nothing twice.
public struct FollowUpJob: Sendable, Hashable, Codable {
    public var id: String
    public var type: String
    /// JSON text.
    public var payload: String
    /// Run no earlier than this (ms since 1970, wall clock); `nil` at once.
    public var runAtMs: Int64?
    /// Renewal checks: when the check is due in App Store time (the simulator's clock can
    /// run ahead of the wall clock), which the renewal sweep compares with.
    public var dueMs: Int64?

    public init(id: String, type: String, payload: String, runAt: Date? = nil, due: Date? = nil) {
        self.id = id
        self.type = type
        self.payload = payload
        self.runAtMs = runAt.map { AppleTimestamp($0).milliseconds }
        self.dueMs = due.map { AppleTimestamp($0).milliseconds }
    }
}
