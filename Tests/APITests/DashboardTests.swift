import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
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
