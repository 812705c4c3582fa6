import AppStore
import Entitlements
import Foundation
import RedisClient

/// What a change to a customer means for the outside world: the webhook events the
/// publisher is told about, and the renewal checks the subscriptions now need. Derived
/// from the document before and after, so the same change always yields the same ids.
public struct ChangeEvents: Sendable {
    public let publisher: Publisher
    /// How far the App Store's clock is ahead of the wall clock (development).
    public let clockOffset: TimeInterval
    public let renewalCheckMargin: Duration
    public let billingRetryCheckInterval: Duration
    public let now: Date

    /// One event as posted to the publisher's webhook.
    public struct Event: Sendable, Hashable, Codable {
        public var id: String
        /// `purchase`, `renewal`, `expiration`, `refund`, `refund_reversed`, `transfer`, `credit`.
        public var type: String
        public var publisher: String
        public var customer: String
        public var occurredAt: Date
        public var transactionId: String?
        public var originalTransactionId: String?
        public var productId: String?
        public var offerId: String?
        public var expiresDate: Date?
        /// The customer's entitlements after the change.
        public var entitlements: [String]
        /// Credits: the change and the balance after it.
        public var amount: Int?
        public var balance: Int?
        /// Transfers: who held the purchase and who holds it now.
        public var from: String?
        public var to: String?
        /// Refunds: Apple's `revocationType` and `revocationPercentage` (milliunits of a
        /// percent, 50000 is 50 %); on a clawback's `credit` event, the share it took.
        public var revocationType: String?
        public var revocationPercentage: Int?
        /// A clawback's `credit` event: credits the refund could not take (already spent).
        public var shortfall: Int?
    }

    public func followUps(before: CustomerEntitlements, after: CustomerEntitlements) -> [FollowUpJob] {
        events(before: before, after: after).map(webhook) + renewalChecks(before: before, after: after)
    }

    /// The webhook job for an event (callers make one only when the publisher has a webhook).
    public func webhook(_ event: Event) -> FollowUpJob {
        FollowUpJob(
            id: "webhook:\(event.id)", type: "webhook",
            payload: JobPayloads.encode(
                JobPayloads.Webhook(publisher: publisher.id, event: JobPayloads.encode(event), eventId: event.id)))
    }

    func events(before: CustomerEntitlements, after: CustomerEntitlements) -> [Event] {
        guard publisher.webhook != nil else { return [] }
        let entitlements = after.entitlements(at: now)
        func event(_ type: String, _ key: String, _ fact: PurchaseFact?, at date: Date) -> Event {
            Event(
                id: "\(publisher.id):\(after.customer):\(type):\(key)", type: type, publisher: publisher.id, customer: after.customer,
                occurredAt: date, transactionId: fact?.transactionId, originalTransactionId: fact?.originalTransactionId,
                productId: fact?.productId, offerId: fact.flatMap { publisher.offer(forProduct: $0.productId)?.offerId },
                expiresDate: fact?.expiresDate, entitlements: entitlements)
        }
        var events: [Event] = []
        for fact in after.transactions.values.sorted(by: { $0.purchaseDate < $1.purchaseDate }) {
            let old = before.transactions[fact.transactionId]
            if old == nil {
                let renews =
                    fact.kind == .autoRenewable
                    && before.transactions.values.contains { $0.originalTransactionId == fact.originalTransactionId }
                events.append(event(renews ? "renewal" : "purchase", fact.transactionId, fact, at: fact.purchaseDate))
            }
            if fact.revocationDate != nil, old?.revocationDate == nil {
                var refund = event("refund", fact.transactionId, fact, at: fact.revocationDate ?? now)
                refund.revocationType = fact.revocationType
                refund.revocationPercentage = fact.revocationPercentage
                events.append(refund)
            } else if fact.revocationDate == nil, old?.revocationDate != nil {
                events.append(event("refund_reversed", fact.transactionId, fact, at: fact.signedDate ?? now))
            }
        }
        for (index, entry) in after.credits.entries.enumerated() where index >= before.credits.entries.count {
            var credit = event(
                "credit", "\(entry.transactionId):\(entry.kind.rawValue):\(index)", after.transactions[entry.transactionId], at: entry.at)
            credit.amount = entry.amount
            credit.balance = after.credits.balance
            credit.revocationPercentage = entry.kind == .clawback ? entry.percentage : nil
            credit.shortfall = entry.shortfall
            events.append(credit)
        }
        for (id, subscription) in after.subscriptions.sorted(by: { $0.key < $1.key })
        where !subscription.status.grantsAccess && (before.subscriptions[id]?.status.grantsAccess ?? true) {
            let ended = subscription.expiresDate.map { String(Int64($0.timeIntervalSince1970)) } ?? "0"
            events.append(event("expiration", "\(id):\(ended)", after.transactions[subscription.latestTransactionId], at: now))
        }
        return events
    }

    /// The next check of each subscription whose state changed and that may still renew.
    func renewalChecks(before: CustomerEntitlements, after: CustomerEntitlements) -> [FollowUpJob] {
        after.subscriptions.sorted(by: { $0.key < $1.key }).compactMap { id, subscription in
            guard before.subscriptions[id] != subscription, let due = dueDate(subscription) else { return nil }
            return renewalCheck(originalTransactionId: id, due: due)
        }
    }

    /// When Apple should next be asked about a subscription (App Store time); `nil` when it
    /// cannot renew any more.
    public func dueDate(_ subscription: SubscriptionRecord) -> Date? {
        switch subscription.status {
        case .active:
            return subscription.expiresDate.map { $0.addingTimeInterval(renewalCheckMargin.seconds) }
        case .gracePeriod:
            return (subscription.gracePeriodExpiresDate ?? subscription.expiresDate).map {
                $0.addingTimeInterval(renewalCheckMargin.seconds)
            }
        case .billingRetry:
            return now.addingTimeInterval(billingRetryCheckInterval.seconds)
        case .expired, .revoked:
            return nil
        }
    }

    public func renewalCheck(originalTransactionId: String, due: Date) -> FollowUpJob {
        let dueMs = AppleTimestamp(due).milliseconds
        return FollowUpJob(
            id: "renewal-check:\(publisher.id):\(originalTransactionId):\(dueMs)", type: "renewal-check",
            payload: JobPayloads.encode(JobPayloads.RenewalCheck(publisher: publisher.id, originalTransactionId: originalTransactionId)),
            runAt: due.addingTimeInterval(-clockOffset), due: due)
    }
}
