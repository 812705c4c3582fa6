import Entitlements
import Foundation
import JobQueue

extension JobPayloads {
    /// `spend`: the publisher's app used some of a customer's credits.
    public struct Spend: Sendable, Hashable, Codable {
        public var publisher: String
        public var customer: String
        /// How many credits, at least 1.
        public var amount: Int
        /// The publisher's key for this use: a repeat spends once.
        public var reference: String

        public init(publisher: String, customer: String, amount: Int, reference: String) {
            self.publisher = publisher
            self.customer = customer
            self.amount = amount
            self.reference = reference
        }
    }
}

/// `spend`: takes credits a customer used from their ledger, once per reference, never
/// below zero. Spent credits are what a later refund cannot take back (its shortfall).
public struct SpendJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    public init(service: EntitlementService) { self.service = service }

    public struct Result: Sendable, Hashable, Codable {
        public var publisher: String
        public var customer: String
        public var reference: String
        /// `spent`, `repeated` (this reference was spent before) or `insufficientCredits`.
        public var outcome: CreditLedger.SpendOutcome
        public var creditBalance: Int
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
            publisher: publisher, customer: payload.customer, fence: nil, now: now, clockOffset: offset, job: job
        ) {
            state in
            let outcome = state.credits.spend(payload.amount, reference: payload.reference, at: now)
            return Result(
                publisher: publisher.id, customer: payload.customer, reference: payload.reference, outcome: outcome,
                creditBalance: state.credits.balance)
        }
    }
}
