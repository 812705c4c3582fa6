import Foundation

/// What Entitle knows of a purchase's use, for Apple's `CONSUMPTION_REQUEST`: whether it
/// delivered what was bought, and how much of it the customer used (milliunits of a
/// percent), by product kind:
///
/// - a consumable: delivered when its credits were granted; used, the share of them spent,
///   first in, first out (spends take the oldest credits first; credits taken back by a
///   refund were not used);
/// - a non-consumable: delivered when the customer holds it; no percentage;
/// - a non-renewing subscription: delivered when its access was granted; used, the share of
///   its access period that has passed;
/// - an auto-renewable subscription: delivered when its access was granted; never a
///   percentage (Apple computes it from time).
///
/// A purchase no customer holds was not delivered by Entitle: undelivered, 0 % used
/// (Apple: a percentage sent with an undelivered status must be 0).
public struct ConsumptionAssessment: Sendable, Hashable, Codable {
    public var delivered: Bool
    /// Milliunits of a percent (100000 is all of it); nil when none is sent.
    public var consumptionPercentage: Int?
    /// How the figures were found, for the job's result.
    public var basis: String

    public init(delivered: Bool, consumptionPercentage: Int?, basis: String) {
        self.delivered = delivered
        self.consumptionPercentage = consumptionPercentage
        self.basis = basis
    }

    /// The assessment of `fact` as `holder` (the customer holding it, if any) stands at `now`.
    public static func assess(_ fact: PurchaseFact, holder: CustomerEntitlements?, now: Date) -> Self {
        let undelivered = Self(
            delivered: false, consumptionPercentage: fact.kind == .autoRenewable ? nil : 0,
            basis: "no customer was granted this purchase")
        guard let holder else { return undelivered }
        switch fact.kind {
        case .consumable:
            guard let use = creditUse(of: fact.transactionId, in: holder.credits) else {
                return Self(delivered: false, consumptionPercentage: 0, basis: "its credits were never granted")
            }
            let share = use.granted > 0 ? Int((Double(use.spent) * 100_000 / Double(use.granted)).rounded()) : 0
            return Self(
                delivered: true, consumptionPercentage: min(share, 100_000),
                basis: "\(use.spent) of \(use.granted) credits spent (first in, first out)")
        case .nonConsumable:
            guard holder.periods.contains(where: { $0.transactionId == fact.transactionId }) else { return undelivered }
            return Self(delivered: true, consumptionPercentage: nil, basis: "access granted")
        case .nonRenewing:
            guard let period = holder.periods.first(where: { $0.transactionId == fact.transactionId }) else { return undelivered }
            guard let end = period.end, end > period.start else {
                return Self(delivered: true, consumptionPercentage: nil, basis: "access granted")
            }
            let passed = min(max(now.timeIntervalSince(period.start), 0), end.timeIntervalSince(period.start))
            let share = Int((passed * 100_000 / end.timeIntervalSince(period.start)).rounded())
            return Self(
                delivered: true, consumptionPercentage: share,
                basis: "\(Int(passed / 86_400)) of \(Int((end.timeIntervalSince(period.start) / 86_400).rounded())) days of access passed")
        case .autoRenewable:
            let granted = holder.periods.contains {
                $0.transactionId == fact.transactionId || $0.originalTransactionId == fact.originalTransactionId
            }
            guard granted else { return undelivered }
            return Self(delivered: true, consumptionPercentage: nil, basis: "access granted")
        }
    }

    /// The credits a purchase granted and how many of them were spent, first in, first out:
    /// each spend takes from the oldest purchase that still has credits; a clawback takes
    /// the refunded purchase's own credits (they were not used), a reinstatement gives them
    /// back. Nil when the ledger never credited the transaction.
    public static func creditUse(of transactionId: String, in ledger: CreditLedger) -> (granted: Int, spent: Int)? {
        guard let granted = ledger.entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })?.amount else {
            return nil
        }
        var remaining: [(transactionId: String, credits: Int)] = []
        var spent = 0
        for entry in ledger.entries {
            switch entry.kind {
            case .purchase:
                remaining.append((entry.transactionId, entry.amount))
            case .spend:
                var due = -entry.amount
                for index in remaining.indices where due > 0 {
                    let taken = min(due, remaining[index].credits)
                    remaining[index].credits -= taken
                    due -= taken
                    if remaining[index].transactionId == transactionId { spent += taken }
                }
            case .clawback, .reinstatement:
                if let index = remaining.firstIndex(where: { $0.transactionId == entry.transactionId }) {
                    remaining[index].credits = max(0, remaining[index].credits + entry.amount)
                }
            }
        }
        return (granted, spent)
    }
}
