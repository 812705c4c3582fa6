import Entitlements
import Foundation

/// What the reports count, by the names `entitle report` and `GET /v1/reports/{metric}`
/// use. Running totals (`stock`) are the value at the end of a day; flows are what happened
/// during it; derived metrics are computed from others when read.
public enum ReportMetric: String, Sendable, Hashable, Codable, CaseIterable {
    // Running totals, kept as daily changes.
    case payingSubscriptions, trialSubscriptions, gracePeriodSubscriptions, billingRetrySubscriptions
    /// Monthly recurring revenue: every paying subscription's price normalised to a month.
    case mrr
    case customersWithCredits
    // Flows.
    case newTrials, newPaidSubscriptions, trialConversions, trialExpirations, renewals, reactivations
    case cancellations, uncancellations, billingIssues, billingRecoveries, productChanges
    case churned, churnedVoluntary, churnedInvoluntary
    case refunds, refundAmount, grossRevenue
    case creditsGranted, creditsSpent, creditsClawedBack
    // Derived when read.
    /// Paying, in a trial or in a grace period: those with access.
    case activeSubscriptions
    case arr, netRevenue
    /// Trial conversions divided by trials that ended (converted or expired).
    case trialConversionRate

    public enum Kind: String, Sendable { case stock, flow, derived }

    public var kind: Kind {
        switch self {
        case .payingSubscriptions, .trialSubscriptions, .gracePeriodSubscriptions, .billingRetrySubscriptions, .mrr,
            .customersWithCredits:
            .stock
        case .activeSubscriptions, .arr, .netRevenue, .trialConversionRate: .derived
        default: .flow
        }
    }

    /// Amounts of money, in milliunits of each currency (never converted).
    public var isMoney: Bool { [.mrr, .arr, .refundAmount, .grossRevenue, .netRevenue].contains(self) }

    /// The unit values are given in.
    public var unit: String {
        if isMoney { return "milliunits" }
        switch self {
        case .trialConversionRate: return "ratio"
        case .creditsGranted, .creditsSpent, .creditsClawedBack: return "credits"
        default: return "count"
        }
    }

    /// Whether the value at a moment is a level (stocks and what is made of them), not a sum over a span.
    public var isLevel: Bool { kind == .stock || self == .activeSubscriptions || self == .arr }

    /// The metrics kept in Redis (the others are computed from them).
    public static let stored = allCases.filter { $0.kind != .derived }
}

/// A calendar day in the publisher's time zone, as `yyyymmdd`.
public struct ReportDay: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public let value: Int

    public init(value: Int) { self.value = value }

    public init(year: Int, month: Int, day: Int) { value = year * 10_000 + month * 100 + day }

    public var year: Int { value / 10_000 }
    public var month: Int { value / 100 % 100 }
    public var day: Int { value % 100 }
    /// `yyyymm`.
    public var monthKey: Int { value / 100 }

    public static func < (lhs: ReportDay, rhs: ReportDay) -> Bool { lhs.value < rhs.value }

    /// `2026-11-25`.
    public var description: String {
        String(format: "%04d-%02d-%02d", year, month, day)
    }

    /// A day from `yyyy-mm-dd`; `nil` when it is not a real date.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }), let year = Int(parts[0]), let month = Int(parts[1]),
            let day = Int(parts[2]), (1970...9999).contains(year), (1...12).contains(month), day >= 1,
            day <= ReportCalendar.daysIn(year: year, month: month)
        else { return nil }
        self.init(year: year, month: month, day: day)
    }
}

/// Days, weeks and months in one time zone (the publisher's; UTC unless its catalog says).
/// Day arithmetic is on the civil calendar, so it needs no time zone and no daylight rules.
public struct ReportCalendar: Sendable {
    public let timeZone: TimeZone

    public init(timeZone: TimeZone) { self.timeZone = timeZone }

    public static let utc = ReportCalendar(timeZone: TimeZone(secondsFromGMT: 0) ?? .current)

    /// The calendar a publisher's days are counted in: its catalog's `timeZone`, else UTC.
    public init(publisher: Publisher) {
        self.init(timeZone: publisher.timeZone.flatMap(TimeZone.init(identifier:)) ?? Self.utc.timeZone)
    }

    public func day(of date: Date) -> ReportDay {
        let seconds = date.timeIntervalSince1970 + Double(timeZone.secondsFromGMT(for: date))
        let clamped = min(max(seconds, -1e14), 1e14)
        return Self.civil(Int64((clamped / 86_400).rounded(.down)))
    }

    /// The first instant of a day in this time zone.
    public func start(of day: ReportDay) -> Date {
        let local = Double(Self.ordinal(day)) * 86_400
        let guess = Date(timeIntervalSince1970: local)
        return Date(timeIntervalSince1970: local - Double(timeZone.secondsFromGMT(for: guess)))
    }

    public func adding(days: Int, to day: ReportDay) -> ReportDay { Self.civil(Self.ordinal(day) + Int64(days)) }

    /// The Monday of the (ISO) week a day is in.
    public func week(of day: ReportDay) -> ReportDay {
        let ordinal = Self.ordinal(day)
        // 1970-01-01 was a Thursday: (ordinal + 3) mod 7 is 0 on Mondays.
        let sinceMonday = ((ordinal + 3) % 7 + 7) % 7
        return Self.civil(ordinal - sinceMonday)
    }

    public static func daysIn(year: Int, month: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Every day from `from` to `to`, both included.
    public func days(from: ReportDay, to: ReportDay) -> [ReportDay] {
        let first = Self.ordinal(from)
        let last = Self.ordinal(to)
        guard first <= last else { return [] }
        return (first...last).map(Self.civil)
    }

    /// Days since 1970-01-01 (H. Hinnant's days_from_civil).
    public static func ordinal(_ day: ReportDay) -> Int64 {
        let year = Int64(day.month <= 2 ? day.year - 1 : day.year)
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let month = Int64(day.month)
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + Int64(day.day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The day `ordinal` days after 1970-01-01 (civil_from_days).
    public static func civil(_ ordinal: Int64) -> ReportDay {
        let shifted = ordinal + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return ReportDay(year: Int(year), month: Int(month), day: Int(day))
    }
}
