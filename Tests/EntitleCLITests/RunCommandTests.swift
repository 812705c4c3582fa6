import AsyncHTTPClient
import Foundation
import LocalProcesses
import NIOCore
import RedisClient
import RedisTestSupport
import Testing

/// `entitle run`, the README's main command: a private redis-server, the simulator, the API
/// and a worker in one process.
@Suite struct RunCommandTests {
    @Test func theDemoMakesAPurchaseThroughTheAPIAndStopsCleanly() async throws {
        let environment = ["ENTITLE_REDIS_URL": ""]
        let once = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["run", "--once", "--port", "0", "--simulator-port", "0"], environment: environment,
            timeout: .seconds(120))
        #expect(once.status == 0, "\(once.errors)")
        #expect(once.output.contains("started a private redis-server at redis://127.0.0.1:"))
        #expect(once.output.contains("POST /v1/purchases -> 202"))
        #expect(once.output.contains(#"-> succeeded: {"accessGranted":true"#), "\(once.output)")
        #expect(once.output.contains(#"entitlements -> ["hd","premium"]"#))
        #expect(once.output.contains("/dashboard#token="))
    }

    @Test func jsonPrintsOneLineForScriptsThenServesUntilSIGTERM() async throws {
        let serving = try ChildProcess(
            ChildProcess.entitleExecutable, ["run", "--json", "--port", "0", "--simulator-port", "0"],
            environment: ["ENTITLE_REDIS_URL": ""])
        defer { if serving.isRunning { serving.signal(SIGKILL) } }
        try await eventually("the JSON line", timeout: .seconds(60)) { serving.output.contains("\n") || !serving.isRunning }
        let lines = serving.output.split(separator: "\n")
        #expect(lines.count == 1, "only the JSON line: \(serving.output)")
        let line = try #require(try JSONSerialization.jsonObject(with: Data(String(lines[0]).utf8)) as? [String: String])
        #expect(
            Set(line.keys) == [
                "api", "simulator", "dashboard", "publisher", "publisherToken", "basicAuth", "softphoneToken", "appKey",
                "customerTokenSecret",
                "softphoneAppKey",
            ])
        let api = try #require(line["api"])
        let token = try #require(line["publisherToken"])
        #expect(line["publisher"] == "demo")
        #expect(line["basicAuth"]?.hasPrefix("Basic ") == true)

        // The token works, and a wrong one does not.
        func get(_ url: String, authorization: String?) async throws -> Int {
            var request = HTTPClientRequest(url: url)
            if let authorization { request.headers.add(name: "Authorization", value: authorization) }
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 22)
            return Int(response.status.code)
        }
        #expect(try await get(api + "/v1/customers/nobody%40example.com/entitlements", authorization: "Bearer \(token)") == 404)
        #expect(try await get(api + "/v1/customers/nobody%40example.com/entitlements", authorization: "Bearer wrong") == 401)
        // The dashboard link carries the operators' token (in the fragment): queues and metrics are theirs.
        let dashboard = try #require(line["dashboard"])
        let adminToken = try #require(
            dashboard.split(separator: "#token=").last?.split(separator: "&").first.flatMap { String($0).removingPercentEncoding },
            "the dashboard link names the admin token")
        #expect(dashboard.hasSuffix("&environment=sandbox"), "the simulator's purchases are the sandbox's: its reports open there")
        #expect(try await get(api + "/v1/queues", authorization: "Bearer \(adminToken)") == 200)
        #expect(
            try await get(api + "/v1/queues", authorization: "Bearer \(token)") == 403, "a publisher does not see every tenant's queues")
        // The Cloud Softphone-style publisher's key is its own.
        #expect(
            try await get(api + "/v1/customers/nobody/entitlements", authorization: "Bearer \(try #require(line["softphoneToken"]))") == 404
        )
        #expect(try await get(try #require(line["dashboard"]), authorization: nil) == 200)
        #expect(try await get(try #require(line["simulator"]) + "/simulator/apps", authorization: nil) == 200)
        // basicAuth is the whole header for /apple/payment: right credentials, bad body -> 400, not 401.
        var payment = HTTPClientRequest(url: api + "/apple/payment")
        payment.method = .POST
        payment.headers.add(name: "Authorization", value: try #require(line["basicAuth"]))
        payment.headers.add(name: "X-Publisher-Token", value: token)
        payment.body = .bytes(ByteBuffer(string: "{}"))
        let refused = try await HTTPClient.shared.execute(payment, timeout: .seconds(30))
        #expect(refused.status.code == 400)

        // A purchase through the API, then the metrics an operator scrapes.
        var buy = HTTPClientRequest(url: try #require(line["simulator"]) + "/simulator/purchases")
        buy.method = .POST
        buy.body = .bytes(ByteBuffer(string: #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.credits.100"}"#))
        let bought = try await HTTPClient.shared.execute(buy, timeout: .seconds(30))
        let receipt = try #require(
            try JSONSerialization.jsonObject(with: Data(try await bought.body.collect(upTo: 1 << 22).readableBytesView)) as? [String: Any])
        var purchase = HTTPClientRequest(url: api + "/v1/purchases")
        purchase.method = .POST
        purchase.headers.add(name: "Authorization", value: "Bearer \(token)")
        purchase.body = .bytes(
            ByteBuffer(
                bytes: try JSONSerialization.data(withJSONObject: [
                    "customer": "ann@example.com", "signedTransaction": try #require(receipt["signedTransaction"] as? String),
                ])))
        let accepted = try await HTTPClient.shared.execute(purchase, timeout: .seconds(30))
        #expect(accepted.status.code == 202)
        // The simulator notifies the API as Apple notifies a URL: in one version (2), not a V1
        // copy of each notification racing its V2 (V1 carries no price).
        var subscribe = HTTPClientRequest(url: try #require(line["simulator"]) + "/simulator/purchases")
        subscribe.method = .POST
        subscribe.body = .bytes(ByteBuffer(string: #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.premium.monthly"}"#))
        let subscribed = try await HTTPClient.shared.execute(subscribe, timeout: .seconds(30))
        let subscription = try #require(
            try JSONSerialization.jsonObject(with: Data(try await subscribed.body.collect(upTo: 1 << 22).readableBytesView))
                as? [String: Any])
        let subscriptionId = try #require(subscription["transactionId"] as? String)
        var sent: [String: Any] = [:]
        try await eventually("the subscription's notification sent", timeout: .seconds(30)) {
            let listed = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: try #require(line["simulator"]) + "/simulator/notifications"), timeout: .seconds(30))
            let entries =
                try JSONSerialization.jsonObject(with: Data(try await listed.body.collect(upTo: 1 << 24).readableBytesView))
                as? [[String: Any]] ?? []
            sent = entries.first { $0["transactionId"] as? String == subscriptionId } ?? [:]
            return (sent["sendAttempts"] as? [Any])?.isEmpty == false
        }
        #expect((sent["v1Attempts"] as? [Any])?.isEmpty == true, "\(sent)")
        var metrics = HTTPClientRequest(url: api + "/metrics")
        metrics.method = .GET
        metrics.headers.add(name: "Authorization", value: "Bearer \(adminToken)")
        let scraped = String(buffer: try await HTTPClient.shared.execute(metrics, timeout: .seconds(30)).body.collect(upTo: 1 << 22))
        #expect(scraped.contains(#"entitle_queue_pending{queue="default"}"#), "\(scraped.prefix(2000))")
        #expect(scraped.contains("entitle_queue_oldest_pending_age_seconds"))
        #expect(scraped.contains(#"entitle_jobs_enqueued_total{queue="default",type="receipt"}"#))
        #expect(scraped.contains("http_server_request_duration"))

        serving.signal(SIGTERM)
        #expect(try await serving.wait(timeout: .seconds(30)) == 0)
        await #expect(throws: (any Error).self, "stopped") { try await get(api + "/healthz", authorization: nil) }
    }
}
