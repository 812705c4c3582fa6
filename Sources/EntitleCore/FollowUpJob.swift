import AppStore
import Foundation

/// A job a change makes necessary (a webhook, the next renewal check), written into the
/// customer's outbox together with the change and enqueued after it (a renewal check: put
/// in the renewal index, which the sweep reads), with `id` as its idempotency key: a crash
/// between the write and the enqueue loses nothing, and a rerun enqueues nothing twice.
package struct FollowUpJob: Sendable, Hashable, Codable {
    package var id: String
    package var type: EntitlementJobType
    /// JSON text.
    package var payload: String
    /// Renewal checks: when the check is due in App Store time (the simulator's clock can
    /// run ahead of the wall clock), which the renewal sweep compares with. (An earlier
    /// version's outbox also holds `runAtMs`, which decoding ignores.)
    package var dueMs: Int64?
    /// Renewal checks: put in the index only where it has no date for the subscription (an
    /// earlier version's outbox has no such field: the date replaces the one there).
    package var ifAbsent: Bool?

    package init<Payload: EntitlementJobPayload>(id: String, _ payload: Payload, due: Date? = nil) throws {
        self.id = id
        self.type = Payload.jobType
        self.payload = try JobPayloads.encode(payload)
        self.dueMs = due.map { AppleTimestamp($0).milliseconds }
    }
}
