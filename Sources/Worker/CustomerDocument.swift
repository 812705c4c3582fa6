import AppStore
import Entitlements
import Foundation

/// A customer as one JSON object at a moment, as `entitle customers show --json` and the
/// HTTP API show it: entitlements, subscriptions and their status as they stood then (from
/// history, computed for that moment), credits.
public enum CustomerDocument {
    public static func object(_ state: CustomerEntitlements, at date: Date) -> [String: Any] {
        let subscriptions = state.subscriptions(at: date).map { subscription -> [String: Any] in
            var object: [String: Any] = [
                "originalTransactionId": subscription.originalTransactionId, "offerId": subscription.offerId,
                "productId": subscription.productId, "status": subscription.status.rawValue,
                "expiresDate": milliseconds(subscription.expiresDate), "autoRenew": subscription.autoRenew ?? NSNull(),
            ]
            if let previous = subscription.previousOriginalTransactionId { object["previousOriginalTransactionId"] = previous }
            if let plan = subscription.billingPlan { object["billingPlan"] = Self.plan(plan) }
            return object
        }
        let ledger = state.credits.entries.filter { $0.at <= date }.map { entry -> [String: Any] in
            var object: [String: Any] = [
                "kind": entry.kind.rawValue, "transactionId": entry.transactionId, "offerId": entry.offerId, "amount": entry.amount,
                "at": milliseconds(entry.at),
            ]
            if let price = entry.price {
                object["price"] = price
                object["currency"] = entry.currency ?? NSNull()
            }
            if let percentage = entry.percentage { object["percentage"] = percentage }
            if let shortfall = entry.shortfall { object["shortfall"] = shortfall }
            if let reference = entry.reference { object["reference"] = reference }
            return object
        }
        return [
            "publisher": state.publisher, "customer": state.customer, "at": milliseconds(date),
            "entitlements": state.entitlements(at: date), "subscriptions": subscriptions,
            "credits": ["balance": state.credits.balance(at: date), "ledger": ledger],
        ]
    }

    /// Whether the customer may use `offer` at `date` (a period of that offer covers it), and
    /// until when (`nil`: for ever, or no access).
    public static func access(_ state: CustomerEntitlements, offer: Offer, at date: Date) -> (granted: Bool, expiresAt: Date?) {
        let covering = state.periods(at: date).filter { $0.offerId == offer.offerId }
        guard !covering.isEmpty else { return (false, nil) }
        let ends = covering.map(\.effectiveEnd)
        return (true, ends.contains { $0 == nil } ? nil : ends.compactMap { $0 }.max())
    }

    /// The offers a customer has had access to, each with its access at `date` and the latest
    /// end of any of its periods (Cleeng's Get Entitlements: one item per offer).
    public static func offers(_ state: CustomerEntitlements, at date: Date) -> [(offerId: String, granted: Bool, expiresAt: Date?)] {
        let held = state.periods.filter { $0.start <= date }
        return Set(held.map(\.offerId)).sorted().map { offerId in
            let periods = held.filter { $0.offerId == offerId }
            let ends = periods.map(\.effectiveEnd)
            let granted = periods.contains { $0.covers(date) }
            return (offerId, granted, ends.contains { $0 == nil } ? nil : ends.compactMap { $0 }.max())
        }
    }

    /// A billing plan as readers see it: the plan, period N of M, the commitment's end and
    /// prices, and whether (and into what) the commitment renews.
    static func plan(_ plan: BillingPlan) -> [String: Any] {
        var object: [String: Any] = ["type": plan.type]
        func set(_ key: String, _ value: Any?) { if let value { object[key] = value } }
        set("period", plan.period)
        set("periods", plan.periods)
        set("commitmentExpiresDate", plan.commitmentExpiresDate.map { AppleTimestamp($0).milliseconds })
        set("commitmentPrice", plan.commitmentPrice)
        set("monthlyPrice", plan.monthlyPrice)
        set("currency", plan.currency)
        set("commitmentRenews", plan.commitmentRenews)
        set("commitmentRenewalProductId", plan.commitmentRenewalProductId)
        set("commitmentRenewalBillingPlanType", plan.commitmentRenewalBillingPlanType)
        set("commitmentRenewalDate", plan.commitmentRenewalDate.map { AppleTimestamp($0).milliseconds })
        set("commitmentRenewalPrice", plan.commitmentRenewalPrice)
        set("renewalBillingPlanType", plan.renewalBillingPlanType)
        return object
    }

    static func milliseconds(_ date: Date?) -> Any { date.map { AppleTimestamp($0).milliseconds } ?? NSNull() }
}
