import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `refund`: learns from Apple whether a transaction is refunded or revoked (or a refund
/// reversed) and applies it to the customer holding it: access ends at the refund date, a
/// consumable's refunded share of credits is clawed back (no more than the balance holds;
/// the rest is a recorded shortfall), a reversal gives back exactly what was taken. Apple's word comes from a signed transaction (re-verified), the App Store Server
/// API, or the latest receipt kept for the purchase.
package struct RefundJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var customer: String?
        package var transactionId: String
        package var originalTransactionId: String?
        package var refunded: Bool
        package var revocationDate: Date?
        /// Apple's `revocationType` (`REFUND_FULL`, `REFUND_PRORATED`, `FAMILY_REVOKE`).
        package var revocationType: String?
        /// Apple's `revocationPercentage`: milliunits of a percent (50000 is 50 %).
        package var revocationPercentage: Int?
        /// Credits taken back (negative: given back by a reversal) and those the refund
        /// could not take because they were spent.
        package var creditsClawedBack: Int?
        package var creditShortfall: Int?
        package var entitlements: [String]
        package var creditBalance: Int?
        package var changed: Bool
        package var message: String?
    }

    /// A subscription's latest transaction and renewal info (Get All Subscription Statuses),
    /// for the refund of one of its transactions: a refund ends a subscription only when it
    /// is of its latest period, and Apple's notifications come in any order (a renewal's after
    /// the refund of the period before it), so the latest is asked, not taken to be the
    /// newest one this server knows. The refunded transaction's own view is the refund job's:
    /// a statuses answer not yet showing the refund must not undo it. Nil without the App
    /// Store Server API, for other kinds, for a purchase nobody holds (kept as told for whoever
    /// claims it), or when Apple does not answer: the refund is applied as known, not held up
    /// (a renewal told later is applied over it).
    func latestOfSubscription(
        refunded fact: PurchaseFact, publisher: Publisher, reader: AppleReader, job: JobContext
    ) async throws
        -> AppleEvidence?
    {
        guard fact.kind == .autoRenewable, fact.revocationDate != nil, reader.gateway.serverAPI(for: fact.environment) != nil,
            try await !service.store.holders(publisher: publisher.id, originalTransactionId: fact.originalTransactionId).isEmpty
        else { return nil }
        do {
            var latest = try await reader.subscription(originalTransactionId: fact.originalTransactionId, environment: fact.environment)
            latest.facts.removeAll { $0.transactionId == fact.transactionId }
            return latest
        } catch let error as AppStoreError {
            await service.applePause.pause(publisher.id, after: error)
            job.logger.warning(
                "applying a subscription's refund without asking Apple for its latest period",
                metadata: ["transactionId": "\(fact.transactionId)", "error": "\(error.code)"])
            return nil
        }
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Refund.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        let reader = try service.reader(publisher, bundleId: payload.bundleId)
        let fact: PurchaseFact
        if let signed = payload.signedTransaction {
            fact = try await reader.signedTransaction(signed)
        } else if reader.gateway.hasServerAPI {
            fact = try await reader.transaction(id: payload.transactionId)
        } else if let original = payload.originalTransactionId,
            let receipt = try await service.store.receipt(publisher: publisher.id, originalTransactionId: original)
        {
            guard let found = try await reader.receipt(receipt).facts.first(where: { $0.transactionId == payload.transactionId }) else {
                throw JobRefusal.notPossible(
                    code: "unknownTransaction", "Apple's receipt does not hold transaction \(payload.transactionId)")
            }
            fact = found
        } else {
            throw JobRefusal.notPossible(
                code: "noEvidence",
                "no signed transaction, App Store Server API key or kept receipt to learn about \(payload.transactionId)")
        }
        guard fact.transactionId == payload.transactionId else {
            throw JobRefusal.invalidPayload("the signed transaction is \(fact.transactionId), not \(payload.transactionId)")
        }
        let id = fact.originalTransactionId
        let latest = try await latestOfSubscription(refunded: fact, publisher: publisher, reader: reader, job: job)
        let unheld = Result(
            publisher: publisher.id, customer: nil, transactionId: fact.transactionId, originalTransactionId: id,
            refunded: fact.revocationDate != nil, revocationDate: fact.revocationDate, revocationType: fact.revocationType,
            revocationPercentage: fact.revocationPercentage, entitlements: [], creditBalance: nil, changed: false,
            message: "no customer holds this purchase yet")
        let migrations = EntitlementStore.migrations(of: [fact])
        // Always under the purchase's lock, held or not (refunds are rare, and not told as a
        // purchase's receipt job runs): one nobody holds is kept for whoever claims it, and a
        // refund and its reversal are kept in Apple's order.
        // A migrated subscription's previous chain is locked too: its holder, carried over,
        // must not move meanwhile.
        let locked = [id] + migrations.values
        return try await service.withLocks(publisher: publisher.id, originalTransactionIds: locked, job: job) { tokens, moment in
            // Whom it reaches is read again under the lock: a transfer that ran before it was
            // taken moved the purchase, and its new holder must lose it too.
            try await service.store.carryMigrations(of: [fact], publisher: publisher.id)
            let (holders, kept) = try await service.store.holdersAndKept(publisher: publisher.id, originalTransactionId: id)
            guard let customer = holders.first else {
                // Every view a refund job reads is a refund or its reversal: kept either way, so
                // the newest signed stands whichever job ran first.
                guard try await service.keepForWhoeverClaims([fact], publisher: publisher.id, lock: tokens[id], views: true, job: job)
                else { return unheld }
                var kept = unheld
                kept.message = "no customer holds this purchase yet: Apple's word is kept for whoever claims it"
                return kept
            }
            let now = moment.now
            var decision: EntitlementDecision?
            // Apple's word kept while nobody held the purchase goes to its holders with this
            // view, the newest signed winning, and is forgotten.
            var told = AppleEvidence(facts: kept)
            told.merge(AppleEvidence(facts: [fact]))
            if let latest { told.merge(latest) }
            // The owner's answer is the result; those sharing the purchase lose or regain it too.
            for holder in holders {
                let applied = try await service.apply(
                    told, publisher: publisher, customer: holder, fence: tokens[id], now: now, job: job
                ).decisions[fact.transactionId]
                decision = decision ?? applied
            }
            if !kept.isEmpty { try await service.store.forgetUnheld(publisher: publisher.id, originalTransactionIds: [id]) }
            try await service.amendFormerHolders(
                [fact], publisher: publisher, originalTransactionId: id, current: holders, fence: tokens[id], moment: moment, job: job)
            // What the holders were told of this transaction: a newer view kept stands over this one.
            let view = told.facts.first { $0.transactionId == fact.transactionId } ?? fact
            return Result(
                publisher: publisher.id, customer: customer, transactionId: fact.transactionId, originalTransactionId: id,
                refunded: view.revocationDate != nil, revocationDate: view.revocationDate, revocationType: view.revocationType,
                revocationPercentage: view.revocationPercentage,
                creditsClawedBack: fact.kind == .consumable ? decision?.creditsClawedBack : nil,
                creditShortfall: fact.kind == .consumable ? decision?.creditShortfall : nil, entitlements: decision?.entitlements ?? [],
                creditBalance: decision?.creditBalance, changed: decision?.changed ?? false, message: nil)
        }
    }
}
