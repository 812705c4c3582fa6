import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Reporting
import Testing

/// The dashboard in a real browser (Debian's chromium, headless): its script reaches the
/// operator routes, fills the tables and draws the charts; the screenshot is read back.
@Suite struct DashboardTests {
    @Test func theDashboardShowsQueuesDeadAndRecentJobsChartsAndACustomer() async throws {
        let browser = try #require(Self.chromium(), "chromium is needed (scripts/setup and .ci/run install Debian's chromium)")
        try await APIStack.run("dashboard", worker: true) { api in
            let bought = try await api.buy("premium.monthly")
            let purchase = try await api.call(
                .POST, "/v1/purchases",
                json: ["customer": "ann@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let purchaseJob = try #require(purchase.json["jobId"] as? String)
            #expect(try await api.call(.GET, "/v1/jobs/\(purchaseJob)?wait=20").json["status"] as? String == "succeeded")
            let dead = try await api.jobQueue.enqueue(EnqueueRequest(type: "noop", payload: #"{"failTimes":9}"#, maxAttempts: 1)).id
            _ = try await api.jobQueue.enqueue(batch: (0..<10).map { _ in EnqueueRequest(type: "noop", payload: #"{"sleepMs":20}"#) })
            try await eventually("the dead job") { try await api.jobQueue.stats(queue: "default").dead == 1 }

            let page = try await api.call(.GET, "/dashboard", token: nil, route: "GET /dashboard")
            #expect(page.status == 200 && page.headers["content-type"]?.hasPrefix("text/html") == true)
            #expect(!page.text.contains(APIStack.adminToken), "the page itself holds no secret")

            let link = "\(api.url)/dashboard#token=\(APIStack.adminToken)&publisher=demo&customer=ann%40example.com"
            let directory = FileManager.default.temporaryDirectory.appending(path: "dashboard-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let common = [
                "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--window-size=1400,1200",
                "--user-data-dir=\(directory.path)/profile", "--virtual-time-budget=9000",
            ]
            // The page as the script left it: tables filled, the customer looked up.
            let dom = try await ChildProcess.run(browser, common + ["--dump-dom", link], timeout: .seconds(120))
            #expect(dom.status == 0, "\(dom.errors.suffix(2000))")
            let html = dom.output
            #expect(html.contains(dead), "the dead job is listed")
            #expect(html.contains(purchaseJob), "the purchase is among the recent jobs")
            #expect(html.contains("ann@example.com") && html.contains("hd, premium"), "the customer lookup shows the entitlements")
            #expect(html.contains(">default<"), "the queue table names the queue")
            #expect(html.contains("updated "), "the refresh succeeded: \(html.suffix(600))")
            #expect(!html.contains("class=\"status error\""), "no request failed")

            let screenshot = directory.appending(path: "dashboard.png").path
            let shot = try await ChildProcess.run(browser, common + ["--screenshot=\(screenshot)", link], timeout: .seconds(120))
            #expect(shot.status == 0 && FileManager.default.fileExists(atPath: screenshot), "\(shot.errors.suffix(2000))")
            if let keep = ProcessInfo.processInfo.environment["ENTITLE_SCREENSHOT_DIR"] {
                try? FileManager.default.copyItem(atPath: screenshot, toPath: keep + "/dashboard.png")
            }
            // Read the picture: a full page, with the four charts' line colours drawn.
            let script = APIStack.root.appending(path: "Tests/APITests/python/png_colors.py").path
            let analysis = try await ChildProcess.run("/usr/bin/env", ["python3", script, screenshot, "2f6fed", "8a5cf6", "2e9d5b"])
            #expect(analysis.status == 0, "\(analysis.errors)")
            let result = try #require(try JSONSerialization.jsonObject(with: Data(analysis.output.utf8)) as? [String: Any])
            #expect(result["width"] as? Int == 1400)
            #expect((result["distinctColors"] as? Int ?? 0) > 200, "a rendered page, not a blank one: \(result)")
            let near = try #require(result["near"] as? [String: Int])
            #expect((near["2f6fed"] ?? 0) > 150, "the depth chart's line: \(near)")
            #expect((near["2e9d5b"] ?? 0) > 150, "the throughput chart's line: \(near)")
            #expect((near["8a5cf6"] ?? 0) > 100, "the age chart's line: \(near)")
        }
    }

    /// The reporting page draws what the API answers: every point of every chart, in the
    /// page's own numbers, equals the API's; the queue charts have a day's history at first
    /// sight; the customer's timeline lists their events.
    @Test func theReportingPageChartsTheAPIsFiguresAndTheQueueChartsHaveHistory() async throws {
        let browser = try #require(Self.chromium(), "chromium is needed (scripts/setup and .ci/run install Debian's chromium)")
        try await APIStack.run("dashboard-reports", worker: true, notify: ["demo"]) { api in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            let start = try await api.simulatorNow()
            var bought: [[String: Any]] = []
            for (index, (product, trial, storefront)) in [
                ("premium.monthly", true, "USA"), ("premium.monthly", false, "FRA"), ("basic.monthly", false, "USA"),
                ("premium.annual", false, "USA"), ("credits.100", false, "USA"),
            ].enumerated() {
                let purchase = try await api.buy(
                    product, extra: ["environment": "Production", "useIntroductoryOffer": trial, "storefront": storefront])
                _ = try await api.claim([
                    "customer": "reader\(index)@example.com", "signedTransaction": try #require(purchase["signedTransaction"] as? String),
                ])
                bought.append(purchase)
                try await api.advance(seconds: 3 * 86_400)
                try await api.settle()
            }
            try await api.simulator(
                "/simulator/subscriptions/\(try #require(bought[2]["originalTransactionId"] as? String))/auto-renew-off", "{}")
            try await api.advance(seconds: 40 * 86_400)
            try await api.settle()
            try await api.simulator("/simulator/transactions/\(try #require(bought[1]["transactionId"] as? String))/refund", "{}")
            try await api.settle()
            try await api.foldReports()
            #expect(try await QueueHistory(jobQueue: api.jobQueue).record(), "a sample of the queues, as a worker writes each minute")

            let calendar = ReportCalendar.utc
            let from = calendar.day(of: start)
            let to = calendar.day(of: try await api.simulatorNow())
            let link =
                "\(api.url)/dashboard#token=\(APIStack.adminToken)&publisher=demo&from=\(from)&to=\(to)&by=day&customer=reader0%40example.com"
            let directory = FileManager.default.temporaryDirectory.appending(path: "dashboard-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let common = [
                "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--window-size=1400,2400",
                "--user-data-dir=\(directory.path)/profile", "--virtual-time-budget=9000",
            ]
            let dom = try await ChildProcess.run(browser, common + ["--dump-dom", link], timeout: .seconds(120))
            #expect(dom.status == 0, "\(dom.errors.suffix(2000))")
            let html = dom.output
            #expect(!html.contains("class=\"error\""), "no report failed: \(html.suffix(800))")

            // Every point each chart shows, against the API's answer for its metric.
            var compared = 0
            for metric in [
                "mrr", "activeSubscriptions", "payingSubscriptions", "trialSubscriptions", "newPaidSubscriptions", "churned",
                "trialConversionRate", "grossRevenue", "refundAmount",
            ] {
                let reply = try await api.call(
                    .GET, "/v1/reports/\(metric)?publisher=demo&from=\(from)&to=\(to)&by=day", token: APIStack.adminToken,
                    route: "GET /v1/reports/{metric}")
                try #require(reply.status == 200, "\(reply.text)")
                let expected = Set(
                    (reply.json["points"] as? [[String: Any]] ?? []).map { point in
                        "\(point["key"] as? String ?? "")|\(point["currency"] as? String ?? "")|\(Self.number(point["value"]))"
                    })
                let shown = Set(
                    Self.rows(in: html).filter { $0["data-metric"] == metric }.map { row in
                        "\(row["data-key"] ?? "")|\(row["data-currency"] ?? "")|\(Self.number(Double(row["data-value"] ?? "")))"
                    })
                #expect(
                    !expected.isEmpty && shown == expected,
                    "\(metric): the page shows \(shown.subtracting(expected).sorted().prefix(5)), the API \(expected.subtracting(shown).sorted().prefix(5))"
                )
                compared += shown.count
            }
            #expect(compared > 300, "the charts showed \(compared) points")
            // A figure that says something: paying subscriptions rose, then the refund took one.
            let paying = Self.rows(in: html).filter { $0["data-metric"] == "payingSubscriptions" }.compactMap {
                Double($0["data-value"] ?? "")
            }
            #expect((paying.max() ?? 0) >= 3, "\(paying)")

            // The queue charts drew a day of history before the page sampled anything itself.
            let queueRows = Self.rows(in: html).filter { $0["data-metric"] == "pending" }
            #expect(!queueRows.isEmpty, "the depth chart shows the recorded minute")
            // The customer's timeline: the trial, its conversion.
            #expect(html.contains("data-type=\"trial_started\"") && html.contains("data-type=\"trial_converted\""), "the timeline")

            let screenshot = directory.appending(path: "reports.png").path
            let shot = try await ChildProcess.run(browser, common + ["--screenshot=\(screenshot)", link], timeout: .seconds(120))
            #expect(shot.status == 0 && FileManager.default.fileExists(atPath: screenshot), "\(shot.errors.suffix(2000))")
            if let keep = ProcessInfo.processInfo.environment["ENTITLE_SCREENSHOT_DIR"] {
                try? FileManager.default.copyItem(atPath: screenshot, toPath: keep + "/reports.png")
            }
            let script = APIStack.root.appending(path: "Tests/APITests/python/png_colors.py").path
            let analysis = try await ChildProcess.run("/usr/bin/env", ["python3", script, screenshot, "2f6fed", "2e9d5b", "8a5cf6"])
            #expect(analysis.status == 0, "\(analysis.errors)")
            let result = try #require(try JSONSerialization.jsonObject(with: Data(analysis.output.utf8)) as? [String: Any])
            let near = try #require(result["near"] as? [String: Int])
            #expect((near["2f6fed"] ?? 0) > 300 && (near["2e9d5b"] ?? 0) > 300, "charts drawn in their colours: \(near)")
        }
    }

    /// The attributes of every `<tr ...>` carrying `data-key` in the page.
    static func rows(in html: String) -> [[String: String]] {
        var rows: [[String: String]] = []
        for match in html.matches(of: /<tr ([^>]*data-key[^>]*)>/) {
            var attributes: [String: String] = [:]
            for pair in String(match.1).matches(of: /([a-z-]+)="([^"]*)"/) { attributes[String(pair.1)] = String(pair.2) }
            rows.append(attributes)
        }
        return rows
    }

    /// A value as both sides write it.
    static func number(_ value: Any?) -> String {
        guard let double = (value as? Double) ?? (value as? NSNumber)?.doubleValue else { return "?" }
        return String(format: "%.6f", double)
    }

    static func chromium() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            for name in ["chromium", "chromium-browser", "google-chrome"] {
                let candidate = "\(directory)/\(name)"
                if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            }
        }
        return nil
    }
}
