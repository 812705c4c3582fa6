import Entitlements
import Foundation

/// What a figure is broken down by: product, offer, storefront and (for money) currency;
/// and the report it is kept in (production or sandbox).
public struct ReportDimensions: Sendable, Hashable {
    public var productId: String
    public var offerId: String
    public var storefront: String
    public var currency: String
    public var environment: ReportEnvironment

    public init(
        productId: String = "", offerId: String = "", storefront: String = "", currency: String = "",
        environment: ReportEnvironment = .production
    ) {
        self.productId = productId
        self.offerId = offerId
        self.storefront = storefront
        self.currency = currency
        self.environment = environment
    }
}

/// One change to one figure on one day.
public struct ReportIncrement: Sendable, Hashable {
    public var day: ReportDay
    public var metric: ReportMetric
    public var dimensions: ReportDimensions
    public var value: Int64

    public init(day: ReportDay, metric: ReportMetric, dimensions: ReportDimensions, value: Int64) {
        self.day = day
        self.metric = metric
        self.dimensions = dimensions
        self.value = value
    }
}

/// Where increments are kept, per metric (a report reads its metric's buckets only): per
/// month, each day's totals by currency (what a chart over a range reads: one small bucket a
/// month); per day and per month, the figures by product, offer, storefront and currency
/// (what a breakdown reads). Production and sandbox figures are kept in buckets of their own.
public enum ReportBucket: Sendable, Hashable {
    case totals(month: Int, metric: ReportMetric, environment: ReportEnvironment)
    case day(ReportDay, metric: ReportMetric, environment: ReportEnvironment)
    case month(Int, metric: ReportMetric, environment: ReportEnvironment)

    /// `dd|currency`.
    public static func totalField(day: Int, currency: String) -> String {
        "\(day < 10 ? "0" : "")\(day)|\(clean(currency))"
    }

    /// The month of a bucket.
    public var month: Int {
        switch self {
        case .totals(let month, _, _), .month(let month, _, _): month
        case .day(let day, _, _): day.monthKey
        }
    }

    /// The report a bucket belongs to.
    public var environment: ReportEnvironment {
        switch self {
        case .totals(_, _, let environment), .day(_, _, let environment), .month(_, _, let environment): environment
        }
    }

    /// `product|offer|storefront|currency`.
    public static func detailField(_ dimensions: ReportDimensions) -> String {
        [dimensions.productId, dimensions.offerId, dimensions.storefront, dimensions.currency].map(clean).joined(separator: "|")
    }

    static func clean(_ text: String) -> String { text.replacingOccurrences(of: "|", with: "_") }

    /// Increments merged into what each bucket's fields change by (zeros left out).
    public static func merge(_ increments: [ReportIncrement]) -> [ReportBucket: [String: Int64]] {
        var buckets: [ReportBucket: [String: Int64]] = [:]
        for increment in increments where increment.value != 0 {
            let currency = increment.metric.isMoney ? increment.dimensions.currency : ""
            var dimensions = increment.dimensions
            dimensions.currency = currency
            let detail = detailField(dimensions)
            let (metric, environment) = (increment.metric, dimensions.environment)
            buckets[.totals(month: increment.day.monthKey, metric: metric, environment: environment), default: [:]][
                totalField(day: increment.day.day, currency: currency), default: 0] += increment.value
            buckets[.day(increment.day, metric: metric, environment: environment), default: [:]][detail, default: 0] +=
                increment.value
            buckets[.month(increment.day.monthKey, metric: metric, environment: environment), default: [:]][
                detail, default: 0] += increment.value
        }
        return buckets.mapValues { $0.filter { $0.value != 0 } }.filter { !$0.value.isEmpty }
    }
}

/// Turns the event log's entries into report increments: lifecycle events into flows (a
/// trial started, revenue, a refund, credits spent), changes of pieces into running totals
/// (a piece adds one at the day it starts and takes it away at the day it ends). Pure, so the
/// incremental reports and a rebuild from the log fold the same entries the same way.
public struct ReportFold: Sendable {
    public let calendar: ReportCalendar

    public init(calendar: ReportCalendar) { self.calendar = calendar }

    public func increments(of event: LifecycleEvent) -> [ReportIncrement] {
        // A family member's access is someone else's purchase: not a sale.
        guard event.familyShared != true, event.shared != true else { return [] }
        let day = calendar.day(of: event.occurredAt)
        let dimensions = ReportDimensions(
            productId: event.productId ?? "", offerId: event.offerId ?? "", storefront: event.storefront ?? "",
            currency: event.currency ?? "", environment: ReportEnvironment(apple: event.environment))
        var increments: [ReportIncrement] = []
        func count(_ metric: ReportMetric, _ value: Int64 = 1) {
            increments.append(ReportIncrement(day: day, metric: metric, dimensions: dimensions, value: value))
        }
        if event.type.carriesRevenue, let price = event.priceMilliunits, event.currency != nil { count(.grossRevenue, price) }
        switch event.type {
        case .trialStarted: count(.newTrials)
        case .initialPurchase: count(.newPaidSubscriptions)
        case .trialConverted:
            count(.newPaidSubscriptions)
            count(.trialConversions)
        case .renewal: count(event.resubscribed == true ? .reactivations : .renewals)
        case .productChange: count(.productChanges)
        case .cancellation: count(.cancellations)
        case .uncancellation: count(.uncancellations)
        case .billingIssue: count(.billingIssues)
        case .billingRecovered: count(.billingRecoveries)
        case .expiration:
            if event.trial == true {
                count(.trialExpirations)
            } else {
                count(.churned)
                switch event.reason {
                case "voluntary", "priceIncreaseDeclined": count(.churnedVoluntary)
                case "billing": count(.churnedInvoluntary)
                default: break
                }
            }
        case .refund:
            count(.refunds)
            if let amount = event.refundMilliunits, event.currency != nil { count(.refundAmount, amount) }
        case .refundReversed:
            // Counted on the day Apple reversed it: the refund's day keeps what was known then.
            if event.revocationType != "FAMILY_REVOKE" {
                count(.refunds, -1)
                if let amount = event.refundMilliunits, event.currency != nil { count(.refundAmount, -amount) }
            }
            if event.restored == true { count(event.trial == true ? .trialExpirations : .churned, -1) }
        case .refundAdjusted:
            // On the refund's own day: what it took, less what was counted then.
            if let amount = event.refundMilliunits, let counted = event.previousRefundMilliunits, event.currency != nil {
                count(.refundAmount, amount - counted)
            }
        case .creditsGranted: count(.creditsGranted, Int64(event.amount ?? 0))
        case .creditsSpent: count(.creditsSpent, Int64(event.amount ?? 0))
        case .creditsClawedBack: count(.creditsClawedBack, Int64(event.amount ?? 0))
        case .revoked, .transfer, .nonRenewingPurchase, .extension, .offerRedeemed, .priceIncrease,
            .gracePeriodStarted, .gracePeriodExpired, .temporaryAccessGranted, .temporaryAccessResolved:
            break
        }
        return increments
    }

    public func increments(of delta: ReportDelta) -> [ReportIncrement] {
        var increments: [ReportIncrement] = []
        for (pieces, sign) in [(delta.removed, Int64(-1)), (delta.added, Int64(1))] {
            for piece in pieces {
                let start = calendar.day(of: piece.from)
                let end = piece.to.map(calendar.day(of:))
                // A piece that starts and ends on one day is never there at a day's end.
                if let end, end <= start { continue }
                let dimensions = ReportDimensions(
                    productId: piece.productId, offerId: piece.offerId, storefront: piece.storefront, currency: piece.currency,
                    environment: piece.environment)
                var metrics: [(ReportMetric, Int64)] = []
                switch piece.phase {
                case .trial: metrics = [(.trialSubscriptions, 1)]
                case .paying:
                    metrics = [(.payingSubscriptions, 1)]
                    if let monthly = piece.monthly, !piece.currency.isEmpty { metrics.append((.mrr, monthly)) }
                case .grace: metrics = [(.gracePeriodSubscriptions, 1)]
                case .billingRetry: metrics = [(.billingRetrySubscriptions, 1)]
                case .credits: metrics = [(.customersWithCredits, 1)]
                }
                for (metric, value) in metrics {
                    increments.append(ReportIncrement(day: start, metric: metric, dimensions: dimensions, value: sign * value))
                    if let end {
                        increments.append(ReportIncrement(day: end, metric: metric, dimensions: dimensions, value: -sign * value))
                    }
                }
            }
        }
        return increments
    }
}
