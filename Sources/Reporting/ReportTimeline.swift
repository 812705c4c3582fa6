import Entitlements
import Foundation

/// A customer's pieces (`ReportPiece`), read from what the customer's document keeps: the
/// access periods each transaction gave (their starts, expiries, grace, early ends and
/// releases), the billing retries Apple reported and the credit ledger. A pure function of
/// the document, so a change's delta is the difference between the pieces before and after.
///
/// Family-shared transactions are a family member's access to what someone else paid for,
/// and a purchase shared under the `share` policy is its holder's: neither makes a piece.
public enum ReportTimeline {
    public static func pieces(of state: CustomerEntitlements, publisher: Publisher) -> [ReportPiece] {
        var pieces: [ReportPiece] = []
        var stints: [String: [(from: Date, to: Date?)]] = [:]
        for period in state.periods.sorted(by: { ($0.start, $0.transactionId) < ($1.start, $1.transactionId) }) {
            guard let fact = state.transactions[period.transactionId], fact.kind == .autoRenewable, !fact.isFamilyShared,
                !state.sharedPurchases.contains(fact.originalTransactionId)
            else { continue }
            stints[fact.originalTransactionId, default: []].append((period.start, period.released))
            let end = period.effectiveEnd
            let expires = fact.expiresDate ?? fact.purchaseDate
            var piece = ReportPiece(
                phase: fact.isFreeTrial ? .trial : .paying, from: period.start, to: nil, productId: fact.productId,
                offerId: period.offerId, storefront: fact.storefront ?? "", currency: fact.currency ?? "",
                environment: ReportEnvironment(apple: fact.environment))
            let paidEnd = end.map { min($0, expires) } ?? expires
            if period.start < paidEnd {
                piece.to = paidEnd
                if piece.phase == .paying { piece.monthly = monthly(fact, offer: publisher.offer(forProduct: fact.productId)) }
                if piece.currency.isEmpty, piece.monthly != nil {
                    piece.currency = publisher.offer(forProduct: fact.productId)?.currency ?? ""
                }
                pieces.append(piece)
            }
            if let end, end > expires, end > period.start {
                // Access past the expiry: the grace period Apple granted while it retried billing.
                var grace = piece
                (grace.phase, grace.from, grace.to, grace.monthly) = (.grace, max(period.start, expires), end, nil)
                pieces.append(grace)
            }
        }
        for retry in state.billingRetries {
            guard let fact = state.transactions[retry.transactionId], !fact.isFamilyShared,
                !state.sharedPurchases.contains(fact.originalTransactionId)
            else { continue }
            // After any grace period (its own phase), and only while the customer held the purchase.
            let graceEnd = state.periods.filter { $0.transactionId == retry.transactionId }.compactMap(\.end).max()
            var from = max(retry.from, graceEnd ?? retry.from)
            var to = retry.to
            let held = (stints[fact.originalTransactionId] ?? []).last { stint in
                (to.map { stint.from < $0 } ?? true) && (stint.to.map { $0 > from } ?? true)
            }
            guard let held else { continue }
            from = max(from, held.from)
            if let released = held.to { to = to.map { min($0, released) } ?? released }
            if let to, to <= from { continue }
            pieces.append(
                ReportPiece(
                    phase: .billingRetry, from: from, to: to, productId: fact.productId,
                    offerId: publisher.offer(forProduct: fact.productId)?.offerId ?? "", storefront: fact.storefront ?? "",
                    currency: fact.currency ?? "", environment: ReportEnvironment(apple: fact.environment)))
        }
        pieces += credits(state.credits, environment: ReportEnvironment(apple: state.creditsEnvironment))
        return pieces
    }

    /// The stretches during which the balance was above zero (entries in date order, as the
    /// ledger dates them); a tester's (credits bought in the sandbox only) in the sandbox's figures.
    static func credits(_ ledger: CreditLedger, environment: ReportEnvironment) -> [ReportPiece] {
        var pieces: [ReportPiece] = []
        var balance = 0
        var since: Date?
        let entries = ledger.entries.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }
        for (_, entry) in entries {
            balance += entry.amount
            if balance > 0, since == nil { since = entry.at }
            if balance <= 0, let start = since {
                if entry.at > start { pieces.append(ReportPiece(phase: .credits, from: start, to: entry.at, environment: environment)) }
                since = nil
            }
        }
        if let since { pieces.append(ReportPiece(phase: .credits, from: since, to: nil, environment: environment)) }
        return pieces
    }

    /// What a paying transaction is worth a month, in milliunits: its price normalised by the
    /// period it was bought for (weekly × 52 / 12, two months / 2, three / 3, six / 6, a year
    /// / 12; a commitment plan's month is its monthly price), rounded half up. Without a
    /// price from Apple or the app, the catalog's offer price.
    public static func monthly(_ fact: PurchaseFact, offer: Offer?) -> Int64? {
        let price =
            fact.priceMilliunits
            ?? offer?.price.flatMap { $0 >= 0 && $0 < 1e12 ? Int64(($0 * 1000).rounded()) : nil }
        guard let price else { return nil }
        let (numerator, denominator) = BillingPeriod(fact).monthlyRatio
        let (scaled, overflow) = price.multipliedReportingOverflow(by: numerator)
        guard !overflow, denominator > 0 else { return price }
        return (scaled + denominator / 2) / denominator
    }
}

/// The period a subscription transaction was bought for, from its dates: Apple's
/// transactions do not name it. Sandbox periods are Apple's compressed ones.
public enum BillingPeriod: Sendable, Hashable {
    case week, month, twoMonths, threeMonths, sixMonths, year
    /// Not a period Apple sells: the transaction's own length, in seconds.
    case other(seconds: Int64)

    public init(_ fact: PurchaseFact) {
        let end = fact.expiresBeforeExtension ?? fact.expiresDate ?? fact.purchaseDate
        let seconds = end.timeIntervalSince(fact.purchaseDate)
        let day = 86_400.0
        let table: [(BillingPeriod, ClosedRange<Double>)]
        if fact.environment == "Sandbox" {
            // Apple's sandbox: a week lasts 3 minutes, a month 5, a year an hour.
            table = [
                (.week, 150.0...210.0), (.month, 270.0...330.0), (.twoMonths, 570.0...630.0), (.threeMonths, 870.0...930.0),
                (.sixMonths, 1_770.0...1_830.0), (.year, 3_570.0...3_630.0),
            ]
        } else {
            let week: ClosedRange<Double> = (6.5 * day)...(7.5 * day)
            let month: ClosedRange<Double> = (27.5 * day)...(31.5 * day)
            let twoMonths: ClosedRange<Double> = (58 * day)...(62.5 * day)
            let threeMonths: ClosedRange<Double> = (88 * day)...(92.5 * day)
            let sixMonths: ClosedRange<Double> = (180 * day)...(184.5 * day)
            let year: ClosedRange<Double> = (364 * day)...(366.5 * day)
            table = [
                (.week, week), (.month, month), (.twoMonths, twoMonths), (.threeMonths, threeMonths), (.sixMonths, sixMonths),
                (.year, year),
            ]
        }
        self = table.first { $0.1.contains(seconds) }?.0 ?? .other(seconds: Int64(max(1, seconds.rounded())))
    }

    /// Multiply a price by the first and divide by the second to get a month's worth.
    public var monthlyRatio: (Int64, Int64) {
        switch self {
        case .week: (52, 12)
        case .month: (1, 1)
        case .twoMonths: (1, 2)
        case .threeMonths: (1, 3)
        case .sixMonths: (1, 6)
        case .year: (1, 12)
        // The average Gregorian month, 2,629,746 seconds.
        case .other(let seconds): (2_629_746, seconds)
        }
    }
}
