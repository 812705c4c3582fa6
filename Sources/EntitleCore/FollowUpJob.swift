import AppStore
import DurationUnits
import Foundation

/// A job a change makes necessary (a webhook, the next renewal check), written into the
/// customer's outbox together with the change and enqueued after it, with `id` as its
/// idempotency key: a crash between the write and the enqueue loses nothing, and a rerun
/// enqueues nothing twice.
package struct FollowUpJob: Sendable, Hashable, Codable {
    package var id: String
    package var type: EntitlementJobType
    /// JSON text.
    package var payload: String
    /// Run no earlier than this (ms since 1970, wall clock); `nil` at once.
    package var runAtMs: Int64?
    /// Renewal checks: when the check is due in App Store time (the simulator's clock can
    /// run ahead of the wall clock), which the renewal sweep compares with.
    package var dueMs: Int64?

    package init<Payload: EntitlementJobPayload>(id: String, _ payload: Payload, runAt: Date? = nil, due: Date? = nil) throws {
        self.id = id
        self.type = Payload.jobType
        self.payload = try JobPayloads.encode(payload)
        self.runAtMs = runAt.map { AppleTimestamp($0).milliseconds }
        self.dueMs = due.map { AppleTimestamp($0).milliseconds }
    }
}
