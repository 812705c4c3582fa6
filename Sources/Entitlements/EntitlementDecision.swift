import Foundation

/// What applying Apple's word to a customer decided: the job result clients read.
public struct EntitlementDecision: Sendable, Hashable, Codable {
    /// Why access was refused.
    public enum Refusal: String, Sendable, Hashable, Codable {
        case unknownProduct, wrongBundle, wrongEnvironment, expired, revoked, invalidReceipt, ownedByAnotherCustomer, offerMismatch
        /// The purchase carries an `appAccountToken` that is not this customer's.
        case appAccountTokenMismatch
        /// An app claimed a purchase another customer holds with proof Apple did not vouch for
        /// recently (see `ClaimRule`): the holder keeps it.
        case staleProofOfPurchase
    }

    public var accessGranted: Bool
    public var offerId: String?
    /// The customer's entitlements now, after the change.
    public var entitlements: [String]
    public var subscription: SubscriptionRecord?
    public var reason: Refusal?
    /// Credits this application added (0 for a repeat) and the balance after it.
    public var creditsAdded: Int
    public var creditBalance: Int
    /// Whether anything changed (false for a replay): webhooks and change events fire only then.
    public var changed: Bool
    /// Credits this application took back for a refund (positive) or gave back for a
    /// reversed one (negative); 0 when none moved.
    public var creditsClawedBack: Int = 0
    /// Credits a refund should have taken but the balance no longer held (spent).
    public var creditShortfall: Int = 0

    public static func refused(_ reason: Refusal, offerId: String? = nil, state: CustomerEntitlements, now: Date) -> Self {
        EntitlementDecision(
            accessGranted: false, offerId: offerId, entitlements: state.entitlements(at: now), subscription: nil, reason: reason,
            creditsAdded: 0, creditBalance: state.credits.balance, changed: false)
    }

    /// Records what the refund entries this application added to the ledger moved, and what
    /// a clawback brought to Apple's share gave back (negative) or took besides.
    mutating func noteRefundCredits(before: CreditLedger, after: CreditLedger, transactionId: String) {
        for (was, entry) in zip(before.entries, after.entries)
        where entry.transactionId == transactionId && entry.kind == .clawback && was.kind == .clawback {
            creditsClawedBack -= entry.amount - was.amount
            creditShortfall += (entry.shortfall ?? 0) - (was.shortfall ?? 0)
        }
        for entry in after.entries.dropFirst(before.entries.count) where entry.transactionId == transactionId {
            switch entry.kind {
            case .clawback:
                creditsClawedBack -= entry.amount
                creditShortfall += entry.shortfall ?? 0
            case .reinstatement: creditsClawedBack -= entry.amount
            case .purchase, .spend: break
            }
        }
    }
}

extension EntitlementDecision {
    /// The answer on `primary`'s purchase once every fact of its change is applied (`self`:
    /// the engine's decision on `primary` as it was applied, which tells the customer before
    /// the facts after it; `state`: the customer after them all). The entitlements and credit
    /// balance are the customer's. For a subscription, access to `primary`'s offer through
    /// the purchase: its status where it still sells that offer (a renewal), else whether a
    /// period of that offer still covers `now` (after an upgrade or a downgrade, what the
    /// access route says of the offer); and the subscription as it stands. An engine refusal
    /// of `primary` stands.
    public func standing(of primary: PurchaseFact, in state: CustomerEntitlements, now: Date) -> EntitlementDecision {
        var answer = self
        (answer.entitlements, answer.creditBalance) = (state.entitlements(at: now), state.credits.balance)
        guard primary.kind == .autoRenewable, reason == nil || reason == .revoked || reason == .expired, let offerId else { return answer }
        let original = primary.originalTransactionId
        let subscription = state.subscriptions[original]
        let granted =
            subscription.flatMap { $0.offerId == offerId ? $0.status.grantsAccess : nil }
            ?? state.periods(at: now).contains { $0.originalTransactionId == original && $0.offerId == offerId }
        let revoked = subscription?.status == .revoked || state.transactions[primary.transactionId]?.revocationDate != nil
        answer.subscription = subscription
        answer.accessGranted = granted
        answer.reason = granted ? nil : revoked ? .revoked : .expired
        return answer
    }
}
