import Foundation
import RedisTestSupport
import Reporting
import Testing

/// `GET /v1/reports/{metric}` and `GET /v1/customers/{id}/events`: who may read them, and
/// bad requests refused with a message (and nothing computed half-way).
@Suite struct ReportRouteTests {
    @Test func badReportAndEventRequestsAreRefusedWithAMessage() async throws {
        try await APIStack.run("report-routes", worker: true) { api in
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            _ = try await api.claim([
                "customer": "ann@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            try await api.foldReports()
            func report(_ query: String, token: String = APIStack.demoToken) async throws -> APIStack.Reply {
                try await api.call(.GET, "/v1/reports/" + query, token: token, route: "GET /v1/reports/{metric}")
            }
            #expect(try await report("newTrials?by=month").status == 200)
            let admin = try await report("newTrials?publisher=demo", token: APIStack.adminToken)
            #expect(admin.status == 200 && (admin.json["points"] as? [[String: Any]])?.contains { $0["value"] as? Double == 1 } == true)
            for (query, status, message) in [
                ("nope", 400, "unknown metric nope"), ("mrr?by=hour", 400, "by must be one of"),
                ("mrr?from=2026-11-30&to=2026-11-01", 400, "is after to"), ("mrr?from=2001-01-01&to=2026-01-01", 400, "ten years"),
                ("mrr?from=2026-02-30", 400, "from must be a date"), ("mrr?to=tomorrow", 400, "to must be a date"),
                ("mrr?publisher=other", 403, "its own publisher"),
            ] {
                let reply = try await report(query)
                #expect(reply.status == status && reply.message.contains(message), "\(query): \(reply.status) \(reply.text)")
            }
            let unnamed = try await report("mrr", token: APIStack.adminToken)
            #expect(unnamed.status == 400 && unnamed.message.contains("?publisher="))
            let missing = try await report("mrr?publisher=acme", token: APIStack.adminToken)
            #expect(missing.status == 404 && missing.message.contains("no publisher acme"))
            let app = try await report("mrr", token: APIStack.appKey)
            #expect(app.status == 403)

            func events(_ query: String) async throws -> APIStack.Reply {
                try await api.call(.GET, "/v1/customers/" + query, route: "GET /v1/customers/{id}/events")
            }
            #expect(try await events("ann%40example.com/events").json["events"] as? [[String: Any]] != nil)
            for (query, status) in [
                ("ann%40example.com/events?limit=0", 400), ("ann%40example.com/events?limit=500", 400),
                ("ann%40example.com/events?before=yesterday", 400), ("nobody%40example.com/events", 404),
            ] {
                let reply = try await events(query)
                #expect(reply.status == status && !reply.message.isEmpty, "\(query): \(reply.status) \(reply.text)")
            }
            // Another publisher's secret key learns nothing of demo's customer.
            let other = try await api.call(
                .GET, "/v1/customers/ann%40example.com/events", token: APIStack.otherToken, route: "GET /v1/customers/{id}/events")
            #expect(other.status == 404)
        }
    }

    /// A tester's sandbox subscription (TestFlight), which renews every five minutes, beside a
    /// customer's production one: production figures count the customer's alone, as Apple's
    /// reports do, and the sandbox's are read apart.
    @Test func sandboxPurchasesAreKeptOutOfProductionFigures() async throws {
        try await APIStack.run("report-environments", worker: true, notify: ["demo"]) { api in
            let start = try await api.simulatorNow()
            for (customer, environment) in [("ann@example.com", "Production"), ("tester@example.com", "Sandbox")] {
                let bought = try await api.buy("premium.monthly", extra: ["environment": environment, "useIntroductoryOffer": false])
                _ = try await api.claim([
                    "customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String),
                ])
            }
            // A sandbox month is five minutes: the tester's subscription renews, the customer's does not.
            for _ in 0..<4 {
                try await api.advance(seconds: 300)
                try await api.settle()
            }
            try await api.foldReports()
            let range = "from=\(ReportCalendar.utc.day(of: start))&to=\(ReportCalendar.utc.day(of: try await api.simulatorNow()))"
            func total(_ metric: String, _ environment: String?) async throws -> Double {
                let query = "\(metric)?\(range)&by=month" + (environment.map { "&environment=\($0)" } ?? "")
                let reply = try await api.call(.GET, "/v1/reports/" + query, route: "GET /v1/reports/{metric}")
                try #require(reply.status == 200, "\(query): \(reply.text)")
                #expect(reply.json["environment"] as? String == environment ?? "production")
                return (reply.json["points"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["value"] as? Double ?? 0) }
            }
            let price = try await total("grossRevenue", nil)
            #expect(price > 0, "the customer's purchase is revenue")
            #expect(try await total("grossRevenue", "production") == price)
            #expect(try await total("newPaidSubscriptions", nil) == 1)
            #expect(try await total("renewals", nil) == 0)
            #expect(try await total("payingSubscriptions", nil) == 1)

            let renewals = try await total("renewals", "sandbox")
            #expect(renewals >= 3, "the tester's subscription renewed every five minutes: \(renewals)")
            #expect(try await total("newPaidSubscriptions", "sandbox") == 1)
            #expect(try await total("grossRevenue", "sandbox") == price * (1 + renewals), "each sandbox renewal, at the same price")

            let refused = try await api.call(.GET, "/v1/reports/mrr?environment=Sandbox", route: "GET /v1/reports/{metric}")
            #expect(refused.status == 400 && refused.message.contains("environment must be production or sandbox"), "\(refused.text)")
        }
    }
}
