import JobQueue

/// The entitlement jobs' type names: one list, shared by the API that enqueues them, the
/// handlers that run them and the CLI.
package enum EntitlementJobType: String, CaseIterable, Codable, Sendable {
    case receipt
    case transfer
    case refund
    case renewalCheck = "renewal-check"
    case notification
    case webhook
    /// The publisher's app used credits (`POST /v1/customers/{id}/credits/spend`).
    case spend
    /// Tells Apple which customer a purchase belongs to (Set App Account Token).
    case appAccountToken = "app-account-token"
    /// Answers Apple's `CONSUMPTION_REQUEST` with Send Consumption Information.
    case consumption
    /// Brings in the notifications Apple sent that never arrived (Get Notification History).
    case reconcile
    /// Rebuilds a customer's purchases from Apple's history and statuses.
    case resync
    /// Finds a push's audience and splits it into batches.
    case push
    /// Sends a push to one batch of its audience's devices.
    case pushBatch = "push-batch"
}

/// A job's payload that names its job type and encodes itself (`JobPayloads`).
package protocol EntitlementJobPayload: Codable, Sendable {
    static var jobType: EntitlementJobType { get }
}

extension EnqueueRequest {
    /// The request for an entitlement job: its type from the payload's, the payload encoded,
    /// labelled with whom it is for (`JobPayloads.label`).
    package init<Payload: EntitlementJobPayload>(
        _ payload: Payload, queue: String, idempotencyKey: String? = nil, uniqueKey: String? = nil, delay: Duration? = nil,
        id: String? = nil
    ) throws {
        let encoded = try JobPayloads.encode(payload)
        self.init(
            type: Payload.jobType.rawValue, payload: encoded, queue: queue, idempotencyKey: idempotencyKey, delay: delay,
            id: id, uniqueKey: uniqueKey)
        label = JobPayloads.label(of: encoded)
    }
}
