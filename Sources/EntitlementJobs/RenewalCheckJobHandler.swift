import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `renewal-check`: asks Apple about a subscription (Get All Subscription Statuses, or
/// verifyReceipt with the latest receipt kept) and applies the answer: renewed, in grace
/// period, in billing retry, expired or refunded. Then it puts the next check in the
/// renewal index, which `RenewalSweep` reads when it is due. When
/// Apple cannot be reached the job is retried and the entitlement stays as it was, which
/// lasts until its own expiry.
package struct RenewalCheckJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var originalTransactionId: String
        package var customer: String?
        package var subscription: SubscriptionRecord?
        package var accessGranted: Bool
        package var entitlements: [String]
        package var nextCheck: Date?
        package var message: String?
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.RenewalCheck.self, job.payload)
        let id = payload.originalTransactionId
        func finished(_ message: String, customer: String? = nil) async throws -> Result {
            try await service.store.forgetRenewalCheck(publisher: payload.publisher, originalTransactionId: id)
            return Result(
                publisher: payload.publisher, originalTransactionId: id, customer: customer, subscription: nil, accessGranted: false,
                entitlements: [], nextCheck: nil, message: message)
        }
        let publisher: Publisher
        do {
            publisher = try service.publisher(payload.publisher)
        } catch JobRefusal.unknownPublisher {
            // Taken out of the catalog: its subscriptions are not checked any more (the sweep
            // would otherwise claim each again at every lease, each failing).
            job.logger.warning("renewal check for a publisher not in the catalog; dropped from the renewal index")
            return try await finished("no publisher \"\(payload.publisher)\" in the catalog")
        }
        // Under the lock, the owner read and the index entry's removal: a claim of the
        // subscription writes its next due date under the same lock, which this must not undo.
        return try await service.withLocks(publisher: publisher.id, originalTransactionIds: [id], job: job) { tokens, moment in
            guard let customer = try await service.store.owner(publisher: publisher.id, originalTransactionId: id) else {
                return try await finished("no customer holds this subscription")
            }
            let now = moment.now
            let state = try await service.store.load(publisher: publisher.id, customer: customer).state
            guard let record = state.subscriptions[id], let latest = state.transactions[record.latestTransactionId] else {
                return try await finished("\(customer) holds no subscription \(id) any more", customer: customer)
            }
            let reader = try service.reader(publisher, bundleId: latest.bundleId)
            var evidence: AppleEvidence
            if reader.gateway.hasServerAPI {
                evidence = try await reader.subscription(originalTransactionId: id, environment: latest.environment)
            } else if let receipt = try await service.store.receipt(publisher: publisher.id, originalTransactionId: id) {
                evidence = try await reader.receipt(receipt)
                evidence.facts.removeAll { $0.originalTransactionId != id }
                if let newer = evidence.latestReceipt {
                    try await service.store.keepReceipt(newer, publisher: publisher.id, originalTransactionIds: [id])
                }
            } else {
                return try await finished("no App Store Server API key and no receipt to ask Apple with", customer: customer)
            }
            let decisions = try await service.apply(
                evidence, publisher: publisher, customer: customer, fence: tokens[id], now: now, job: job
            ).decisions
            // Those sharing the subscription (the `share` policy) learn the same.
            for sharer in try await service.store.holders(publisher: publisher.id, originalTransactionId: id).dropFirst() {
                _ = try await service.apply(
                    evidence, publisher: publisher, customer: sharer, fence: tokens[id], now: now, job: job)
            }
            let after = try await service.store.load(publisher: publisher.id, customer: customer).state
            let subscription = after.subscriptions[id]
            // The next check, also when nothing changed (billing retry is asked again and again).
            let events = service.changeEvents(publisher, now: now)
            var nextCheck: Date?
            if let subscription, let due = events.dueDate(subscription), due > now {
                nextCheck = due
                try await service.deliver(
                    [try events.renewalCheck(originalTransactionId: id, due: due)], publisher: publisher.id, customer: customer, job: job)
            } else {
                try await service.store.forgetRenewalCheck(publisher: publisher.id, originalTransactionId: id)
            }
            return Result(
                publisher: publisher.id, originalTransactionId: id, customer: customer, subscription: subscription,
                accessGranted: subscription?.status.grantsAccess ?? false,
                entitlements: decisions.values.first?.entitlements ?? after.entitlements(at: now), nextCheck: nextCheck, message: nil)
        }
    }
}
