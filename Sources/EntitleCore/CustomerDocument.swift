import AppStore
import DurationUnits
import Entitlements
import Foundation

/// A customer as one JSON object at a moment, as `entitle customers show --json` and the
/// HTTP API show it: entitlements, subscriptions and their status as they stood then (from
/// history, computed for that moment), credits.
package struct CustomerDocument: Encodable, Sendable {
    package struct Subscription: Encodable, Sendable {
        var originalTransactionId: String
        var offerId: String
        var productId: String
        var status: String
        var expiresDate: Int64?
        var autoRenew: Bool?
        /// A migrated subscription: the chain it came from.
        var previousOriginalTransactionId: String?
        var billingPlan: Plan?
        /// Access granted while Apple could not be asked ends then unless Apple confirms it (ms).
        var provisionalUntil: Int64?

        private enum CodingKeys: String, CodingKey {
            case originalTransactionId, offerId, productId, status, expiresDate, autoRenew, previousOriginalTransactionId, billingPlan
            case provisionalUntil
        }

        // `null`s are written, not left out: readers see every field of every subscription.
        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(originalTransactionId, forKey: .originalTransactionId)
            try container.encode(offerId, forKey: .offerId)
            try container.encode(productId, forKey: .productId)
            try container.encode(status, forKey: .status)
            try container.encode(expiresDate, forKey: .expiresDate)
            try container.encode(autoRenew, forKey: .autoRenew)
            try container.encodeIfPresent(previousOriginalTransactionId, forKey: .previousOriginalTransactionId)
            try container.encodeIfPresent(billingPlan, forKey: .billingPlan)
            try container.encodeIfPresent(provisionalUntil, forKey: .provisionalUntil)
        }
    }

    /// A billing plan as readers see it: the plan, period N of M, the commitment's end and
    /// prices, and whether (and into what) the commitment renews; absent fields left out.
    package struct Plan: Encodable, Sendable {
        var type: String
        var period: Int?
        var periods: Int?
        var commitmentExpiresDate: Int64?
        var commitmentPrice: String?
        var monthlyPrice: String?
        var currency: String?
        var commitmentRenews: Bool?
        var commitmentRenewalProductId: String?
        var commitmentRenewalBillingPlanType: String?
        var commitmentRenewalDate: Int64?
        var commitmentRenewalPrice: String?
        var renewalBillingPlanType: String?

        init(_ plan: BillingPlan) {
            type = plan.type
            period = plan.period
            periods = plan.periods
            commitmentExpiresDate = CustomerDocument.milliseconds(plan.commitmentExpiresDate)
            commitmentPrice = plan.commitmentPrice
            monthlyPrice = plan.monthlyPrice
            currency = plan.currency
            commitmentRenews = plan.commitmentRenews
            commitmentRenewalProductId = plan.commitmentRenewalProductId
            commitmentRenewalBillingPlanType = plan.commitmentRenewalBillingPlanType
            commitmentRenewalDate = CustomerDocument.milliseconds(plan.commitmentRenewalDate)
            commitmentRenewalPrice = plan.commitmentRenewalPrice
            renewalBillingPlanType = plan.renewalBillingPlanType
        }
    }

    package struct LedgerEntry: Encodable, Sendable {
        var kind: String
        var transactionId: String
        var offerId: String
        var amount: Int
        var at: Int64?
        /// With `currency` (written, `null` when unknown) when the purchase's price is known.
        var price: String?
        var currency: String?
        /// A clawback: the refunded share (milliunits of a percent) and the credits it could
        /// not take; a spend: the publisher's reference for it.
        var percentage: Int?
        var shortfall: Int?
        var reference: String?

        private enum CodingKeys: String, CodingKey {
            case kind, transactionId, offerId, amount, at, price, currency, percentage, shortfall, reference
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(kind, forKey: .kind)
            try container.encode(transactionId, forKey: .transactionId)
            try container.encode(offerId, forKey: .offerId)
            try container.encode(amount, forKey: .amount)
            try container.encode(at, forKey: .at)
            if let price {
                try container.encode(price, forKey: .price)
                try container.encode(currency, forKey: .currency)
            }
            try container.encodeIfPresent(percentage, forKey: .percentage)
            try container.encodeIfPresent(shortfall, forKey: .shortfall)
            try container.encodeIfPresent(reference, forKey: .reference)
        }
    }

    package struct Credits: Encodable, Sendable {
        var balance: Int
        var ledger: [LedgerEntry]
    }

    var publisher: String
    var customer: String
    var at: Int64?
    var entitlements: [String]
    var subscriptions: [Subscription]
    var credits: Credits

    package init(_ state: CustomerEntitlements, at date: Date) {
        publisher = state.publisher
        customer = state.customer
        at = Self.milliseconds(date)
        entitlements = state.entitlements(at: date)
        subscriptions = state.subscriptions(at: date).map { subscription in
            Subscription(
                originalTransactionId: subscription.originalTransactionId, offerId: subscription.offerId,
                productId: subscription.productId, status: subscription.status.rawValue,
                expiresDate: Self.milliseconds(subscription.expiresDate), autoRenew: subscription.autoRenew,
                previousOriginalTransactionId: subscription.previousOriginalTransactionId,
                billingPlan: subscription.billingPlan.map(Plan.init), provisionalUntil: Self.milliseconds(subscription.provisionalUntil))
        }
        let ledger = state.credits.entries.filter { $0.at <= date }.map { entry in
            LedgerEntry(
                kind: entry.kind.rawValue, transactionId: entry.transactionId, offerId: entry.offerId, amount: entry.amount,
                at: Self.milliseconds(entry.at), price: entry.price, currency: entry.currency, percentage: entry.percentage,
                shortfall: entry.shortfall, reference: entry.reference)
        }
        credits = Credits(balance: state.credits.balance(at: date), ledger: ledger)
    }

    /// Whether the customer may use `offer` at `date` (a period of that offer covers it), and
    /// until when (`nil`: for ever, or no access).
    package static func access(_ state: CustomerEntitlements, offer: Offer, at date: Date) -> (granted: Bool, expiresAt: Date?) {
        let covering = state.periods(at: date).filter { $0.offerId == offer.offerId }
        guard !covering.isEmpty else { return (false, nil) }
        let ends = covering.map(state.accessEnd(of:))
        return (true, ends.contains { $0 == nil } ? nil : ends.compactMap { $0 }.max())
    }

    /// The offers a customer has had access to, each with its access at `date` and the latest
    /// end of any of its periods (Cleeng's Get Entitlements: one item per offer).
    package static func offers(_ state: CustomerEntitlements, at date: Date) -> [(offerId: String, granted: Bool, expiresAt: Date?)] {
        let held = state.periods.filter { $0.start <= date }
        return Set(held.map(\.offerId)).sorted().map { offerId in
            let periods = held.filter { $0.offerId == offerId }
            let ends = periods.map(state.accessEnd(of:))
            let granted = periods.contains { state.gives($0, at: date) }
            return (offerId, granted, ends.contains { $0 == nil } ? nil : ends.compactMap { $0 }.max())
        }
    }

    static func milliseconds(_ date: Date?) -> Int64? { date.map { AppleTimestamp($0).milliseconds } }
}
