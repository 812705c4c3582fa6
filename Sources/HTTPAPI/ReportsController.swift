import EntitleCore
import Entitlements
import Foundation
import Hummingbird
import Reporting

/// A publisher's reports (`GET /v1/reports/{metric}?from&to&by&environment`), read from the figures the
/// worker folds out of the event log: for the publisher's secret key, and for operators with
/// the admin token and `?publisher=`.
struct ReportsController {
    let api: EntitleAPI

    func addRoutes(to routes: RouteTable) {
        routes.add(.get, "/v1/reports/{metric}") { request, context in
            let parameters = request.uri.queryParameters
            let named = parameters.get("publisher")
            let publisher: Publisher
            switch try api.caller(request, context) {
            case .secretKey(let own):
                if let named, named != own.id { throw APIError(.forbidden, "forbidden", "a secret key reads its own publisher's reports") }
                publisher = own
            case .admin:
                guard let named else { throw APIError.badRequest("operators name the publisher: ?publisher=ID") }
                guard let found = api.settings.catalog.publisher(named) else { throw APIError.notFound("no publisher \(named.prefix(64))") }
                publisher = found
            case .app:
                throw APIError(.forbidden, "forbidden", "reports take the publisher's secret key (from its backend), not an app key")
            }
            let calendar = ReportCalendar(publisher: publisher)
            let today = calendar.day(of: try await api.now())
            let metric = try RequestInput.path(context, "metric")
            let report: ReportRequest
            do throws(ReportRequest.Invalid) {
                report = try ReportRequest.parse(
                    metrics: [metric], from: parameters.get("from"), to: parameters.get("to"), by: parameters.get("by"),
                    environment: parameters.get("environment"), today: today, calendar: calendar)
            } catch {
                throw APIError.badRequest(error.message)
            }
            let reports = api.store.reports
            let query = ReportQuery(
                calendar: calendar, source: reports.source(publisher.id, generation: try await reports.generation(publisher.id)),
                environment: report.environment)
            return try JSONBody.response(
                encoding: try await query.run(report.metrics[0], from: report.from, to: report.to, by: report.grouping))
        }
    }
}
