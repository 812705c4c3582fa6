import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `spend`: takes credits a customer used from their ledger, once per reference, never
/// below zero. Spent credits are what a later refund cannot take back (its shortfall).
package struct SpendJobHandler: EntitlementJobHandler {
    var asksApple: Bool { false }
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var customer: String
        package var reference: String
        /// `spent`, `repeated` (this reference was spent before) or `insufficientCredits`.
        package var outcome: CreditLedger.SpendOutcome
        package var creditBalance: Int
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Spend.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        guard payload.amount > 0 else { throw JobRefusal.invalidPayload("amount must be at least 1") }
        guard !payload.reference.isEmpty, payload.reference.utf8.count <= 128 else {
            throw JobRefusal.invalidPayload("reference must be 1 to 128 bytes")
        }
        let offset = try await service.configuration.clock.offset()
        let now = Date().addingTimeInterval(offset)
        return try await service.change(
            publisher: publisher, customer: payload.customer, fence: nil, now: now, job: job
        ) {
            state in
            let outcome = state.credits.spend(payload.amount, reference: payload.reference, at: now)
            return Result(
                publisher: publisher.id, customer: payload.customer, reference: payload.reference, outcome: outcome,
                creditBalance: state.credits.balance)
        }
    }
}
