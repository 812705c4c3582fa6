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
/// What a customer holds but was never granted is undelivered, 0 % used (Apple: a
/// percentage sent with an undelivered status must be 0). A purchase no customer holds is
/// not assessed at all: it may have been delivered before Entitle, or by another system.
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

    /// The assessment of `fact` as `holder` (the customer holding it) stands at `now`.
    public static func assess(_ fact: PurchaseFact, holder: CustomerEntitlements, now: Date) -> Self {
        let undelivered = Self(
            delivered: false, consumptionPercentage: fact.kind == .autoRenewable ? nil : 0,
            basis: "the customer holding it was never granted it")
        switch fact.kind {
        case .consumable:
            guard let use = creditUse(of: fact.transactionId, in: holder.credits) else {
                return Self(delivered: false, consumptionPercentage: 0, basis: "its credits were never granted")
            }
            let share = use.granted > 0 ? Int((Double(use.used) * 100_000 / Double(use.granted)).rounded()) : 0
            return Self(
                delivered: true, consumptionPercentage: min(share, 100_000),
                basis: "\(use.used) of \(use.granted) credits used (first in, first out)")
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

    /// The credits a purchase granted and how many of them were used, first in, first out:
    /// each spend takes from the oldest purchase that still has credits. A refund's clawback
    /// takes the refunded purchase's own credits first (those were not used) and then, when
    /// they were spent, other purchases' (the balance paid for the refund); a reversal gives
    /// the purchase back what its refund took. A purchase's use is what it granted less what
    /// it still holds and what its own refund took: credits another refund took from it count
    /// as used, since the customer no longer has them and was not refunded for them. Nil when
    /// the ledger never credited the transaction.
    public static func creditUse(of transactionId: String, in ledger: CreditLedger) -> (granted: Int, used: Int)? {
        guard let granted = ledger.entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })?.amount else {
            return nil
        }
        var remaining: [(transactionId: String, credits: Int)] = []
        var refunded: [String: Int] = [:]
        // Where each purchase's refund took its credits from, so its reversal gives them back there.
        var clawedFrom: [String: [(transactionId: String, credits: Int)]] = [:]
        func take(_ amount: Int, preferring preferred: String?) -> [(transactionId: String, credits: Int)] {
            var due = amount
            var taken: [(transactionId: String, credits: Int)] = []
            let order = remaining.indices.sorted {
                (remaining[$0].transactionId == preferred ? 0 : 1, $0) < (remaining[$1].transactionId == preferred ? 0 : 1, $1)
            }
            for index in order where due > 0 {
                let part = min(due, remaining[index].credits)
                guard part > 0 else { continue }
                remaining[index].credits -= part
                due -= part
                taken.append((remaining[index].transactionId, part))
            }
            return taken
        }
        for entry in ledger.entries {
            switch entry.kind {
            case .purchase:
                remaining.append((entry.transactionId, entry.amount))
            case .spend:
                _ = take(-entry.amount, preferring: nil)
            case .clawback:
                let taken = take(-entry.amount, preferring: entry.transactionId)
                clawedFrom[entry.transactionId] = taken
                refunded[entry.transactionId, default: 0] += taken.filter { $0.transactionId == entry.transactionId }.reduce(0) {
                    $0 + $1.credits
                }
            case .reinstatement:
                var due = entry.amount
                for (source, credits) in clawedFrom[entry.transactionId] ?? [] where due > 0 {
                    let part = min(due, credits)
                    if let index = remaining.firstIndex(where: { $0.transactionId == source }) { remaining[index].credits += part }
                    if source == entry.transactionId { refunded[source] = max(0, refunded[source, default: 0] - part) }
                    due -= part
                }
                clawedFrom[entry.transactionId] = nil
            }
        }
        let left = remaining.first { $0.transactionId == transactionId }?.credits ?? 0
        return (granted, max(0, granted - left - refunded[transactionId, default: 0]))
    }
}
