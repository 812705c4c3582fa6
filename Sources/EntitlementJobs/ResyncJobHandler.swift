import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `resync`: rebuilds a customer's purchases from Apple, for when notifications were lost
/// and the customer's view is in doubt (support's "refresh from Apple"). For the purchases
/// the customer holds (as owner or sharer), by app and environment: Get Transaction History
/// (every page; only the transactions of purchases this customer holds are taken: the
/// history is the Apple account's, which may have bought for others) and, for
/// subscriptions, Get All Subscription Statuses; then each purchase is applied under its
/// lock as any job applies Apple's word: what is already known changes nothing, so only
/// the missing events are appended.
package struct ResyncJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var customer: String
        /// The purchases (original transaction ids) asked about.
        package var purchases: [String]
        /// Transactions of those purchases Apple's history and statuses gave.
        package var transactions: Int
        /// Purchases of apps without an App Store Server API key: left as they were.
        package var skipped: [String]
        package var changed: Bool
        package var entitlements: [String]
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Resync.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        let customer = payload.customer
        let (state, version) = try await service.store.load(publisher: publisher.id, customer: customer)
        guard version > 0 else { throw JobRefusal.notPossible(code: "unknownCustomer", "\(publisher.id) has no customer \(customer)") }
        // The purchases the customer holds now, each with a transaction that says its app and environment.
        var held: [String: PurchaseFact] = [:]
        for fact in state.transactions.values.sorted(by: { $0.transactionId < $1.transactionId })
        where held[fact.originalTransactionId] == nil {
            let holders = try await service.store.holders(publisher: publisher.id, originalTransactionId: fact.originalTransactionId)
            guard holders.contains(customer) else { continue }
            held[fact.originalTransactionId] = fact
        }
        var result = Result(
            publisher: publisher.id, customer: customer, purchases: held.keys.sorted(), transactions: 0, skipped: [], changed: false,
            entitlements: [])
        var evidence = AppleEvidence()
        let groups = Dictionary(grouping: held.values) { "\($0.bundleId)\n\($0.environment)" }
        for key in groups.keys.sorted() {
            let facts = (groups[key] ?? []).sorted { $0.transactionId < $1.transactionId }
            guard let first = facts.first else { continue }
            let reader = try service.reader(publisher, bundleId: first.bundleId)
            guard reader.gateway.hasServerAPI else {
                result.skipped += facts.map(\.originalTransactionId).sorted()
                continue
            }
            let ids = Set(facts.map(\.originalTransactionId))
            do {
                // The history is one Apple account's: asked again for a purchase another account made.
                for fact in facts where !evidence.facts.contains(where: { $0.originalTransactionId == fact.originalTransactionId }) {
                    for signed in try await reader.serverAPI(fact.environment).getAllTransactionHistory(transactionId: fact.transactionId) {
                        let found = try await reader.signedTransaction(signed)
                        if ids.contains(found.originalTransactionId) { evidence.merge(AppleEvidence(facts: [found])) }
                    }
                }
                for fact in facts where fact.kind == .autoRenewable {
                    var statuses = try await reader.subscription(
                        originalTransactionId: fact.originalTransactionId, environment: fact.environment)
                    statuses.facts.removeAll { !ids.contains($0.originalTransactionId) }
                    evidence.merge(statuses)
                }
            } catch let error as AppStoreError where !error.isRetryable {
                throw JobRefusal.notPossible(code: "apple" + (error.apiErrorCode.map { String($0) } ?? error.code.rawValue), error.message)
            }
        }
        result.transactions = evidence.facts.count
        for id in held.keys.sorted() where !result.skipped.contains(id) {
            var mine = AppleEvidence(facts: evidence.facts.filter { $0.originalTransactionId == id })
            mine.renewals[id] = evidence.renewals[id]
            guard !mine.facts.isEmpty else { continue }
            let changed = try await service.withLocks(publisher: publisher.id, originalTransactionIds: [id], job: job) { tokens, moment in
                // Asked again under the lock: a transfer while Apple was asked moved it away.
                let holders = try await service.store.holders(publisher: publisher.id, originalTransactionId: id)
                guard holders.contains(customer) else { return false }
                return try await service.apply(
                    mine, publisher: publisher, customer: customer, fence: tokens[id], now: moment.now,
                    sharing: holders.first == customer ? [] : [id], job: job
                ).decisions.values.contains { $0.changed }
            }
            result.changed = result.changed || changed
        }
        let after = try await service.store.load(publisher: publisher.id, customer: customer).state
        let now = try await service.configuration.clock.now()
        result.entitlements = after.entitlements(at: now)
        return result
    }
}
