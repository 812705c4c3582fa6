import Foundation

/// What a report is asked for, checked: the API (`GET /v1/reports/{metric}`) and the CLI
/// (`entitle report`) read their parameters through it, so both refuse the same things with
/// the same messages.
public struct ReportRequest: Sendable, Hashable {
    public var metrics: [ReportMetric]
    public var from: ReportDay
    public var to: ReportDay
    public var grouping: ReportGrouping
    public var environment: ReportEnvironment

    /// Why a request cannot be answered.
    public struct Invalid: Error, Sendable, Hashable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Checks the parameters as given (`nil`: absent). Days are `yyyy-mm-dd`; `to` defaults to
    /// `today`, `from` to 29 days before `to`; `by` to `day`; `environment` to `production`.
    public static func parse(
        metrics names: [String], from: String?, to: String?, by: String?, environment: String? = nil, today: ReportDay,
        calendar: ReportCalendar
    ) throws(Invalid) -> ReportRequest {
        let known = ReportMetric.allCases.map(\.rawValue).joined(separator: ", ")
        guard !names.isEmpty else { throw Invalid(message: "name a metric (\(known))") }
        var metrics: [ReportMetric] = []
        for name in names {
            guard let metric = ReportMetric(rawValue: name) else {
                throw Invalid(message: "unknown metric \(name.prefix(64)); known: \(known)")
            }
            if !metrics.contains(metric) { metrics.append(metric) }
        }
        func day(_ text: String?, _ name: String) throws(Invalid) -> ReportDay? {
            guard let text else { return nil }
            guard let day = ReportDay(text) else {
                throw Invalid(message: "\(name) must be a date such as 2026-01-31 (yyyy-mm-dd, 1970 to 9999)")
            }
            return day
        }
        let end = try day(to, "to") ?? today
        let start = try day(from, "from") ?? calendar.adding(days: -29, to: end)
        guard start <= end else { throw Invalid(message: "from (\(start)) is after to (\(end))") }
        let days = ReportCalendar.ordinal(end) - ReportCalendar.ordinal(start) + 1
        guard days <= ReportQuery.maximumDays else {
            throw Invalid(message: "a report covers at most ten years (\(ReportQuery.maximumDays) days); this range is \(days)")
        }
        let grouping: ReportGrouping
        if let by {
            guard let known = ReportGrouping(rawValue: by) else {
                throw Invalid(
                    message: "by must be one of \(ReportGrouping.allCases.map(\.rawValue).joined(separator: ", ")), not \(by.prefix(64))")
            }
            grouping = known
        } else {
            grouping = .day
        }
        var report = ReportEnvironment.production
        if let environment {
            guard let known = ReportEnvironment(rawValue: environment) else {
                throw Invalid(message: "environment must be production or sandbox, not '\(environment.prefix(64))'")
            }
            report = known
        }
        return ReportRequest(metrics: metrics, from: start, to: end, grouping: grouping, environment: report)
    }
}
