import AppStore
import DurationUnits
import Entitlements
import Foundation
import RedisClient

/// What a change to a customer means for the outside world: the webhook events the
/// publisher is told about, and the renewal checks the subscriptions now need. Derived
/// from the document before and after, so the same change always yields the same ids.
package struct ChangeEvents: Sendable {
    package let publisher: Publisher
    /// How far the App Store's clock is ahead of the wall clock (development).
    package let clockOffset: TimeInterval
    package let renewalCheckMargin: Duration
    package let billingRetryCheckInterval: Duration
    package let now: Date

    package init(
        publisher: Publisher, clockOffset: TimeInterval, renewalCheckMargin: Duration, billingRetryCheckInterval: Duration, now: Date
    ) {
        self.publisher = publisher
        self.clockOffset = clockOffset
        self.renewalCheckMargin = renewalCheckMargin
        self.billingRetryCheckInterval = billingRetryCheckInterval
        self.now = now
    }

    /// One event as posted to the publisher's webhook.
    package struct Event: Sendable, Hashable, Codable {
        package var id: String
        /// `purchase`, `renewal`, `expiration`, `refund`, `refund_reversed`, `transfer`, `credit`.
        package var type: String
        package var publisher: String
        package var customer: String
        package var occurredAt: Date
        package var transactionId: String?
        package var originalTransactionId: String?
        package var productId: String?
        package var offerId: String?
        package var expiresDate: Date?
        /// The customer's entitlements after the change.
        package var entitlements: [String]
        /// Credits: the change and the balance after it.
        package var amount: Int?
        package var balance: Int?
        /// Transfers: who held the purchase and who holds it now.
        package var from: String?
        package var to: String?
        /// Refunds: Apple's `revocationType` and `revocationPercentage` (milliunits of a
        /// percent, 50000 is 50 %); on a clawback's `credit` event, the share it took.
        package var revocationType: String?
        package var revocationPercentage: Int?
        /// A clawback's `credit` event: credits the refund could not take (already spent).
        package var shortfall: Int?
        /// Transfers: who asked for the move (`appKey`: an app's claim; `secretKey`: the
        /// publisher's backend), why Apple's word was taken for an app's claim, and whether the
        /// purchase's `appAccountToken` is the new holder's (absent when it carries none or the
        /// publisher does not say how tokens are made).
        package var road: ClaimRule.Road?
        package var vouchedBy: ClaimRule.Voucher?
        package var appAccountTokenMatched: Bool?

        package init(
            id: String, type: String, publisher: String, customer: String, occurredAt: Date, transactionId: String? = nil,
            originalTransactionId: String? = nil, productId: String? = nil, offerId: String? = nil, expiresDate: Date? = nil,
            entitlements: [String], amount: Int? = nil, balance: Int? = nil, from: String? = nil, to: String? = nil,
            revocationType: String? = nil, revocationPercentage: Int? = nil, shortfall: Int? = nil
        ) {
            self.id = id
            self.type = type
            self.publisher = publisher
            self.customer = customer
            self.occurredAt = occurredAt
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.productId = productId
            self.offerId = offerId
            self.expiresDate = expiresDate
            self.entitlements = entitlements
            self.amount = amount
            self.balance = balance
            self.from = from
            self.to = to
            self.revocationType = revocationType
            self.revocationPercentage = revocationPercentage
            self.shortfall = shortfall
        }
    }

    package func followUps(before: CustomerEntitlements, after: CustomerEntitlements) throws -> [FollowUpJob] {
        try events(before: before, after: after).map(webhook) + renewalChecks(before: before, after: after)
    }

    /// The webhook job for an event (callers make one only when the publisher has a webhook).
    package func webhook(_ event: Event) throws -> FollowUpJob {
        try FollowUpJob(
            id: "webhook:\(event.id)",
            JobPayloads.Webhook(publisher: publisher.id, event: JobPayloads.encode(event), eventId: event.id))
    }

    package func events(before: CustomerEntitlements, after: CustomerEntitlements) -> [Event] {
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
    func renewalChecks(before: CustomerEntitlements, after: CustomerEntitlements) throws -> [FollowUpJob] {
        try after.subscriptions.sorted(by: { $0.key < $1.key }).compactMap { id, subscription in
            guard before.subscriptions[id] != subscription, let due = dueDate(subscription) else { return nil }
            return try renewalCheck(originalTransactionId: id, due: due)
        }
    }

    /// When Apple should next be asked about a subscription (App Store time); `nil` when it
    /// cannot renew any more.
    package func dueDate(_ subscription: SubscriptionRecord) -> Date? {
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

    package func renewalCheck(originalTransactionId: String, due: Date) throws -> FollowUpJob {
        let dueMs = AppleTimestamp(due).milliseconds
        return try FollowUpJob(
            id: "renewal-check:\(publisher.id):\(originalTransactionId):\(dueMs)",
            JobPayloads.RenewalCheck(publisher: publisher.id, originalTransactionId: originalTransactionId),
            runAt: due.addingTimeInterval(-clockOffset), due: due)
    }
}
