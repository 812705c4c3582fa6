import AppStore
import Entitlements
import Foundation

/// A customer as one JSON object at a moment, as `entitle customers show --json` and the
/// HTTP API show it: entitlements then (from history), subscriptions, credits.
public enum CustomerDocument {
    public static func object(_ state: CustomerEntitlements, at date: Date) -> [String: Any] {
        let subscriptions = state.subscriptions.values.sorted { $0.originalTransactionId < $1.originalTransactionId }.map {
            subscription -> [String: Any] in
            [
                "originalTransactionId": subscription.originalTransactionId, "offerId": subscription.offerId,
                "productId": subscription.productId, "status": subscription.status.rawValue,
                "expiresDate": milliseconds(subscription.expiresDate), "autoRenew": subscription.autoRenew ?? NSNull(),
            ]
        }
        let ledger = state.credits.entries.map { entry -> [String: Any] in
            [
                "kind": entry.kind.rawValue, "transactionId": entry.transactionId, "offerId": entry.offerId, "amount": entry.amount,
                "at": milliseconds(entry.at),
            ]
        }
        return [
            "publisher": state.publisher, "customer": state.customer, "at": milliseconds(date),
            "entitlements": state.entitlements(at: date), "subscriptions": subscriptions,
            "credits": ["balance": state.credits.balance, "ledger": ledger],
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

    static func milliseconds(_ date: Date?) -> Any { date.map { AppleTimestamp($0).milliseconds } ?? NSNull() }
}
