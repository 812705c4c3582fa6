import Foundation

/// Where a report reads the figures the fold kept (Redis in Entitle; a dictionary in tests).
public protocol ReportSource: Sendable {
    /// The fields of one bucket (`ReportBucket`), empty when it has none.
    func fields(of buckets: [ReportBucket]) async throws -> [[String: Int64]]
    /// The first month (`yyyymm`) any figure was kept for; `nil` when none was.
    func firstMonth() async throws -> Int?
}

/// How a report's points are grouped: over time, or by a breakdown over the whole range.
public enum ReportGrouping: String, Sendable, Hashable, Codable, CaseIterable {
    case day, week, month, offer, storefront, product

    public var isTime: Bool { self == .day || self == .week || self == .month }
}

/// One figure: a period (`2026-11-25`, the Monday of a week, `2026-11`) or a breakdown's
/// value (an offer id), in `currency` for money.
public struct ReportPoint: Sendable, Hashable, Codable {
    public var key: String
    public var currency: String?
    public var value: Double

    public init(key: String, currency: String? = nil, value: Double) {
        self.key = key
        self.currency = currency
        self.value = value
    }
}

public struct ReportResult: Sendable, Hashable, Codable {
    public var metric: String
    public var unit: String
    public var by: String
    public var from: String
    public var to: String
    /// `production` or `sandbox`: whose purchases the figures count.
    public var environment: String
    public var points: [ReportPoint]
}

/// Answers "what was metric M from day A to day B, by X" from the kept figures: a running
/// total is its value at the end of each period (or of the range, for a breakdown), a flow
/// its sum over it. Reads one bucket per month for a series, never the event log.
public struct ReportQuery: Sendable {
    public let calendar: ReportCalendar
    public let source: any ReportSource
    /// Whose purchases it counts: production (as Apple's reports do) unless asked.
    public let environment: ReportEnvironment

    public init(calendar: ReportCalendar, source: any ReportSource, environment: ReportEnvironment = .production) {
        self.calendar = calendar
        self.source = source
        self.environment = environment
    }

    /// The longest range a report covers.
    public static let maximumDays = 3_660

    public func run(_ metric: ReportMetric, from: ReportDay, to: ReportDay, by grouping: ReportGrouping) async throws -> ReportResult {
        let points: [ReportPoint]
        if grouping.isTime, metric == .trialConversionRate {
            // Per period: the conversions over the trials that ended in it (converted or not).
            let conversions = group(
                try await series(.trialConversions, from: from, to: to), metric: .trialConversions, from: from, to: to, by: grouping)
            let expirations = group(
                try await series(.trialExpirations, from: from, to: to), metric: .trialExpirations, from: from, to: to, by: grouping)
            points = zip(conversions, expirations).map { converted, expired in
                let ended = converted.value + expired.value
                return ReportPoint(key: converted.key, value: ended > 0 ? converted.value / ended : 0)
            }
        } else if grouping.isTime {
            let series = try await self.series(metric, from: from, to: to)
            points = group(series, metric: metric, from: from, to: to, by: grouping)
        } else {
            points = try await breakdown(metric, from: from, to: to, by: grouping)
        }
        return ReportResult(
            metric: metric.rawValue, unit: metric.unit, by: grouping.rawValue, from: from.description, to: to.description,
            environment: environment.rawValue, points: points)
    }

    // MARK: Series over time

    /// Per day in the range and per currency ("" when not money): the metric's value.
    func series(_ metric: ReportMetric, from: ReportDay, to: ReportDay) async throws -> [ReportDay: [String: Double]] {
        switch metric {
        case .activeSubscriptions:
            return try await sum([.payingSubscriptions, .trialSubscriptions, .gracePeriodSubscriptions], from: from, to: to)
        case .arr:
            return try await series(.mrr, from: from, to: to).mapValues { $0.mapValues { $0 * 12 } }
        case .netRevenue:
            let gross = try await series(.grossRevenue, from: from, to: to)
            let refunds = try await series(.refundAmount, from: from, to: to)
            return combine(gross, refunds) { $0 - $1 }
        default:
            return try await stored(metric, from: from, to: to)
        }
    }

    func sum(_ metrics: [ReportMetric], from: ReportDay, to: ReportDay) async throws -> [ReportDay: [String: Double]] {
        var total: [ReportDay: [String: Double]] = [:]
        for metric in metrics { total = combine(total, try await series(metric, from: from, to: to), +) }
        return total
    }

    func combine(
        _ left: [ReportDay: [String: Double]], _ right: [ReportDay: [String: Double]], _ operation: (Double, Double) -> Double
    ) -> [ReportDay: [String: Double]] {
        var result = left
        for (day, values) in right {
            for (currency, value) in values { result[day, default: [:]][currency] = operation(left[day]?[currency] ?? 0, value) }
        }
        return result
    }

    /// A stored metric per day of the range: flows as they are, running totals summed from
    /// the first figure ever kept.
    func stored(_ metric: ReportMetric, from: ReportDay, to: ReportDay) async throws -> [ReportDay: [String: Double]] {
        let stock = metric.kind == .stock
        let firstMonth = stock ? (try await source.firstMonth() ?? from.monthKey) : from.monthKey
        let months = Self.months(from: min(firstMonth, from.monthKey), to: to.monthKey)
        let buckets = try await source.fields(of: months.map { ReportBucket.totals(month: $0, metric: metric, environment: environment) })
        var daily: [ReportDay: [String: Double]] = [:]
        for (month, fields) in zip(months, buckets) {
            for (field, value) in fields {
                let parts = field.split(separator: "|", omittingEmptySubsequences: false)
                guard parts.count == 2, let day = Int(parts[0]) else { continue }
                daily[ReportDay(value: month * 100 + day), default: [:]][String(parts[1]), default: 0] += Double(value)
            }
        }
        var result: [ReportDay: [String: Double]] = [:]
        if stock {
            var running: [String: Double] = [:]
            for day in daily.keys.filter({ $0 < from }) {
                for (currency, value) in daily[day] ?? [:] { running[currency, default: 0] += value }
            }
            for day in calendar.days(from: from, to: to) {
                for (currency, value) in daily[day] ?? [:] { running[currency, default: 0] += value }
                result[day] = running
            }
        } else {
            for day in calendar.days(from: from, to: to) { result[day] = daily[day] ?? [:] }
        }
        return result
    }

    func group(
        _ series: [ReportDay: [String: Double]], metric: ReportMetric, from: ReportDay, to: ReportDay, by grouping: ReportGrouping
    ) -> [ReportPoint] {
        var buckets: [(key: String, days: [ReportDay])] = []
        for day in calendar.days(from: from, to: to) {
            let key: String
            switch grouping {
            case .week: key = calendar.week(of: day).description
            case .month: key = String(day.description.prefix(7))
            default: key = day.description
            }
            if buckets.last?.key == key { buckets[buckets.count - 1].days.append(day) } else { buckets.append((key, [day])) }
        }
        let currencies = Set(series.values.flatMap(\.keys)).sorted()
        let money = metric.isMoney
        var points: [ReportPoint] = []
        for bucket in buckets {
            for currency in (money ? currencies.filter { !$0.isEmpty } : [""]) {
                let value: Double
                if metric.isLevel {
                    value = bucket.days.last.flatMap { series[$0]?[currency] } ?? 0
                } else {
                    value = bucket.days.reduce(0) { $0 + (series[$1]?[currency] ?? 0) }
                }
                points.append(ReportPoint(key: bucket.key, currency: money ? currency : nil, value: value))
            }
        }
        return points
    }

    // MARK: Breakdowns

    func breakdown(_ metric: ReportMetric, from: ReportDay, to: ReportDay, by grouping: ReportGrouping) async throws -> [ReportPoint] {
        let values = try await breakdownValues(metric, from: from, to: to, by: grouping)
        return values.sorted { ($0.key.key, $0.key.currency) < ($1.key.key, $1.key.currency) }.map {
            ReportPoint(key: $0.key.key, currency: metric.isMoney ? $0.key.currency : nil, value: $0.value)
        }
    }

    struct GroupKey: Hashable {
        var key: String
        var currency: String
    }

    func breakdownValues(
        _ metric: ReportMetric, from: ReportDay, to: ReportDay, by grouping: ReportGrouping
    ) async throws -> [GroupKey: Double] {
        func add(_ metrics: [ReportMetric], _ sign: Double = 1) async throws -> [GroupKey: Double] {
            var total: [GroupKey: Double] = [:]
            for part in metrics {
                for (key, value) in try await breakdownValues(part, from: from, to: to, by: grouping) {
                    total[key, default: 0] += sign * value
                }
            }
            return total
        }
        switch metric {
        case .activeSubscriptions: return try await add([.payingSubscriptions, .trialSubscriptions, .gracePeriodSubscriptions])
        case .arr: return try await add([.mrr]).mapValues { $0 * 12 }
        case .netRevenue:
            let gross = try await add([.grossRevenue])
            let refunds = try await add([.refundAmount])
            return gross.merging(refunds.mapValues { -$0 }, uniquingKeysWith: +)
        case .trialConversionRate:
            let conversions = try await add([.trialConversions])
            let ended = try await add([.trialConversions, .trialExpirations])
            return ended.filter { $0.value > 0 }.reduce(into: [:]) { $0[$1.key] = (conversions[$1.key] ?? 0) / $1.value }
        default: break
        }
        // The buckets to read: whole months from their month bucket, the rest day by day.
        var buckets: [ReportBucket] = []
        if metric.kind == .stock {
            let first = try await source.firstMonth() ?? to.monthKey
            buckets += Self.months(from: first, to: to.monthKey).dropLast().map { .month($0, metric: metric, environment: environment) }
            buckets += calendar.days(from: ReportDay(year: to.year, month: to.month, day: 1), to: to).map {
                .day($0, metric: metric, environment: environment)
            }
        } else {
            for month in Self.months(from: from.monthKey, to: to.monthKey) {
                let first = ReportDay(value: month * 100 + 1)
                let last = ReportDay(value: month * 100 + ReportCalendar.daysIn(year: month / 100, month: month % 100))
                if first >= from && last <= to {
                    buckets.append(.month(month, metric: metric, environment: environment))
                } else {
                    buckets += calendar.days(from: max(first, from), to: min(last, to)).map {
                        .day($0, metric: metric, environment: environment)
                    }
                }
            }
        }
        var values: [GroupKey: Double] = [:]
        for fields in try await source.fields(of: buckets) {
            for (field, value) in fields {
                let parts = field.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                guard parts.count == 4 else { continue }
                let dimension =
                    switch grouping {
                    case .offer: parts[1]
                    case .storefront: parts[2]
                    default: parts[0]
                    }
                values[GroupKey(key: dimension.isEmpty ? "unknown" : dimension, currency: parts[3]), default: 0] += Double(value)
            }
        }
        return metric.kind == .stock ? values.filter { $0.value != 0 } : values
    }

    /// Every month (`yyyymm`) from one to another, both included.
    static func months(from: Int, to: Int) -> [Int] {
        guard from <= to else { return [] }
        var months: [Int] = []
        var month = from
        while month <= to {
            months.append(month)
            month = month % 100 == 12 ? (month / 100 + 1) * 100 + 1 : month + 1
        }
        return months
    }
}
