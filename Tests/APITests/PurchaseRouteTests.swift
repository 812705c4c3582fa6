import Foundation
import HTTPTestSupport
import JobQueue
import RedisTestSupport
import Testing

/// `POST /v1/purchases`, then polling the job, the entitlements and the access check.
@Suite struct PurchaseRouteTests {
    @Test func aSignedTransactionIsQueuedOnceProvedAndReadBack() async throws {
        try await APIStack.run("purchase", worker: true) { api in
            let bought = try await api.buy("premium.monthly")
            let signed = try #require(bought["signedTransaction"] as? String)
            let body: [String: Any] = ["customer": "ann@example.com", "signedTransaction": signed, "offerId": "premium"]
            let first = try await api.call(.POST, "/v1/purchases", json: body, route: "POST /v1/purchases")
            #expect(first.status == 202)
            let jobId = try #require(first.json["jobId"] as? String)

            // Long-poll: answers as soon as the job is done.
            let job = try await api.call(.GET, "/v1/jobs/\(jobId)?wait=20", route: "GET /v1/jobs/{id}")
            #expect(job.status == 200)
            #expect(job.json["status"] as? String == "succeeded")
            #expect(job.json["payload"] == nil, "the payload holds the receipt: never shown")
            let result = try #require(job.json["result"] as? [String: Any])
            #expect(result["accessGranted"] as? Bool == true)
            #expect(result["entitlements"] as? [String] == ["hd", "premium"])

            let now = try await api.call(.GET, "/v1/customers/ann%40example.com/entitlements", route: "GET /v1/customers/{id}/entitlements")
            #expect(now.status == 200 && now.json["entitlements"] as? [String] == ["hd", "premium"])
            // History: before the purchase there was nothing.
            let before = try await api.call(
                .GET, "/v1/customers/ann@example.com/entitlements?at=2020-01-01T00:00:00Z", route: "GET /v1/customers/{id}/entitlements")
            #expect(before.status == 200 && before.json["entitlements"] as? [String] == [])
            let access = try await api.call(
                .GET, "/v1/customers/ann@example.com/access/premium", route: "GET /v1/customers/{id}/access/{offerId}")
            #expect(access.json["accessGranted"] as? Bool == true)
            #expect((access.json["expiresAt"] as? String).flatMap { try? Date($0, strategy: .iso8601) } != nil)
            let none = try await api.call(
                .GET, "/v1/customers/ann@example.com/access/basic", route: "GET /v1/customers/{id}/access/{offerId}")
            #expect(none.json["accessGranted"] as? Bool == false && none.json["expiresAt"] is NSNull)
            #expect(
                try await api.call(.GET, "/v1/customers/ann@example.com/access/gold", route: "GET /v1/customers/{id}/access/{offerId}")
                    .status == 404)
            #expect(
                try await api.call(.GET, "/v1/customers/nobody@example.com/entitlements", route: "GET /v1/customers/{id}/entitlements")
                    .status == 404)
            #expect(
                try await api.call(
                    .GET, "/v1/customers/ann@example.com/entitlements?at=yesterday", route: "GET /v1/customers/{id}/entitlements"
                ).status == 400)
            #expect(try await api.call(.GET, "/v1/jobs/\(jobId)?wait=31", route: "GET /v1/jobs/{id}").status == 400)
            #expect(try await api.call(.GET, "/v1/jobs/no-such-job", route: "GET /v1/jobs/{id}").status == 404)
        }
    }

    @Test func anExactRepeatInFlightIsTheSameJobAndAnotherRequestIsRefusedWith409() async throws {
        // No worker: the first job stays queued.
        try await APIStack.run("inflight") { api in
            let bought = try await api.buy("credits.100")
            let transactionId = try #require(bought["transactionId"] as? String)
            let first = try await api.call(
                .POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": transactionId], route: "POST /v1/purchases")
            #expect(first.status == 202)
            // The exact repeat (an app retrying) while the job is unfinished gets the same job.
            let repeated = try await api.call(
                .POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": transactionId], route: "POST /v1/purchases")
            #expect(repeated.status == 202 && repeated.json["jobId"] as? String == first.json["jobId"] as? String)
            let other = try await api.call(
                .POST, "/v1/purchases", json: ["customer": "bob@example.com", "transactionId": transactionId], route: "POST /v1/purchases")
            #expect(other.status == 409)
            #expect(other.json["error"] as? String == "inFlight")
            #expect(other.headers["location"] == "/v1/jobs/\(first.json["jobId"] as? String ?? "")")
            #expect(try await api.enqueuedCount() == 1)
        }
    }

    @Test func badInputIsRefusedWithAMessageAndNothingIsQueued() async throws {
        try await APIStack.run("bad-input") { api in
            let bought = try await api.buy("credits.100")
            let signed = try #require(bought["signedTransaction"] as? String)
            let renewalInfo = try #require(try await api.buy("premium.monthly")["signedRenewalInfo"] as? String)
            let appTransaction = try await Self.appTransaction(api, of: try #require(bought["transactionId"] as? String))
            let keepsReceipt = try #require(try await api.buy("credits.100", publisher: "keep")["appReceipt"] as? String)
            // A real receipt Apple signed for an app no publisher here has (Tests/Vectors/PROVENANCE.md).
            let applesReceipt = try String(
                contentsOf: Self.vectors.appending(path: "receipts/tpinappreceipt/receipt-production"), encoding: .utf8)
            let cases: [(String, Int, String, json: Any?, body: String?)] = [
                ("malformed JSON", 400, "not a JSON object", nil, #"{"customer": "#),
                ("a JSON array", 400, "not a JSON object", nil, "[1,2]"),
                ("an empty body", 400, "empty", nil, ""),
                ("a wrong type", 400, "customer must be a string", ["customer": 5, "transactionId": "1"], nil),
                ("an unknown field", 400, "unknown field amount", ["customer": "ann@example.com", "transactionId": "1", "amount": 3], nil),
                ("no evidence", 400, "give one of", ["customer": "ann@example.com"], nil),
                ("two roads", 400, "comes alone", ["customer": "ann@example.com", "signedTransaction": signed, "transactionId": "1"], nil),
                ("a customer that is not an email", 400, "email", ["customer": "ann", "transactionId": "1"], nil),
                ("a transaction id that is not digits", 400, "digits", ["customer": "ann@example.com", "transactionId": "12a"], nil),
                ("bad base64", 400, "not base64", ["customer": "ann@example.com", "appReceipt": "%%%not base64%%%"], nil),
                (
                    "another publisher's app's receipt", 422, "for an app demo does not have",
                    ["customer": "ann@example.com", "appReceipt": keepsReceipt], nil
                ),
                (
                    "Apple's receipt of another app", 422, "for an app demo does not have",
                    ["customer": "ann@example.com", "appReceipt": applesReceipt], nil
                ),
                (
                    "a forged signed transaction", 400, "not a valid App Store transaction",
                    ["customer": "ann@example.com", "signedTransaction": forged(signed)], nil
                ),
                (
                    "garbage for a signed transaction", 400, "not a valid App Store transaction",
                    ["customer": "ann@example.com", "signedTransaction": "a.b.c"], nil
                ),
                (
                    "a renewal info for a signed transaction", 400, "not a transaction",
                    ["customer": "ann@example.com", "signedTransaction": renewalInfo], nil
                ),
                (
                    "an app transaction for a signed transaction", 400, "names no transaction",
                    ["customer": "ann@example.com", "signedTransaction": appTransaction], nil
                ),
                ("an unknown offer", 422, "no offer gold", ["customer": "ann@example.com", "transactionId": "1", "offerId": "gold"], nil),
                (
                    "an offer the product does not sell", 422, "not sold by product",
                    ["customer": "ann@example.com", "signedTransaction": signed, "offerId": "premium"], nil
                ),
                (
                    "an unknown app", 422, "no app", ["customer": "ann@example.com", "transactionId": "1", "bundleId": "com.example.nope"],
                    nil
                ),
                ("a huge body", 413, "larger than", nil, "{\"customer\":\"" + String(repeating: "a", count: 300 << 10) + "\"}"),
            ]
            for (what, status, message, json, body) in cases {
                let reply = try await api.call(.POST, "/v1/purchases", json: json, body: body, route: "POST /v1/purchases")
                #expect(reply.status == status, "\(what): \(reply.status) \(reply.text)")
                #expect(reply.message.contains(message), "\(what): \(reply.message)")
                if status == 422 && message.contains("does not have") {
                    #expect(reply.json["error"] as? String == "wrongBundle", "\(what)")
                }
            }
            // A dry run asked for twice, one way and the other, is neither.
            let twice = try await api.call(
                .POST, "/v1/purchases?dryRun=false&dryRun=true", json: ["customer": "ann@example.com", "signedTransaction": signed],
                route: "POST /v1/purchases")
            #expect(twice.status == 400 && twice.message.contains("more than once"), "\(twice.text)")
            #expect(try await api.enqueuedCount() == 0, "a refused request queues nothing")
        }
    }

    /// Where an app receipt is checked: one verified here for the publisher's app is queued; one
    /// that cannot be verified here (an iOS 6 transaction receipt) is queued for Apple to judge.
    @Test func appReceiptsOfThePublishersAppOrUnverifiableHereAreQueued() async throws {
        try await APIStack.run("receipt-door") { api in
            let own = try #require(try await api.buy("credits.100")["appReceipt"] as? String)
            let ios6 = try String(
                contentsOf: Self.vectors.appending(
                    path: "receipts/legacy-transaction-receipts/aporat-ios6-transaction-receipt-sandbox-2012.b64"),
                encoding: .utf8)
            for (what, receipt) in [("the demo app's receipt", own), ("an iOS 6 transaction receipt", ios6)] {
                let reply = try await api.call(
                    .POST, "/v1/purchases", json: ["customer": "ann@example.com", "appReceipt": receipt], route: "POST /v1/purchases")
                #expect(reply.status == 202, "\(what): \(reply.status) \(reply.text)")
            }
            #expect(try await api.enqueuedCount() == 2)
        }
    }

    /// A publisher with two apps: a receipt of its second app, posted without `bundleId`, is
    /// verified with that app (its shared secret, its bundle), which the door read from the
    /// receipt, not with whichever app the catalog lists first.
    @Test func aReceiptOfAPublishersSecondAppIsVerifiedAsThatApps() async throws {
        try await APIStack.run(
            "receipt-second-app", worker: true,
            catalog: { publishers in
                // The keep publisher's app, listed first, becomes the demo publisher's.
                publishers.removeAll { $0["id"] as? String == "keep" }
                let apps = publishers[0]["apps"] as? [[String: Any]] ?? []
                publishers[0]["apps"] = [DemoCatalogs.app("keep")] + apps
            }
        ) { api in
            let receipt = try #require(try await api.buy("credits.100")["appReceipt"] as? String)
            let result = try await api.claim(["customer": "ann@example.com", "appReceipt": receipt])
            #expect(result["accessGranted"] as? Bool == true, "\(result)")
            #expect((result["credits"] as? [String: Any])?["added"] as? Int == 100, "\(result)")
        }
    }

    static let vectors = DemoCatalogs.root.appending(path: "Tests/Vectors")

    /// A signed app transaction, as a RESCIND_CONSENT notification about the purchase carries it.
    static func appTransaction(_ api: APIStack, of transactionId: String) async throws -> String {
        let rescinded = try await api.simulator("/simulator/transactions/\(transactionId)/rescind-consent", "{}")
        let entry = try await api.sentNotification(try #require((rescinded["notifications"] as? [String])?.first))
        let body = try #require(try JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any])
        var part = String(try #require((body["signedPayload"] as? String)?.split(separator: ".").dropFirst().first))
        part = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        part += String(repeating: "=", count: (4 - part.count % 4) % 4)
        let decoded = try #require(Data(base64Encoded: part))
        let payload = try #require(try JSONSerialization.jsonObject(with: decoded) as? [String: Any])
        return try #require((payload["appData"] as? [String: Any])?["signedAppTransactionInfo"] as? String, "\(payload)")
    }

    @Test func publishersAreAuthenticatedIsolatedAndRateLimited() async throws {
        try await APIStack.run("auth", worker: true) { api in
            let bought = try await api.buy("credits.100")
            let body: [String: Any] = ["customer": "ann@example.com", "transactionId": try #require(bought["transactionId"] as? String)]
            let missing = try await api.call(.POST, "/v1/purchases", token: nil, json: body, route: "POST /v1/purchases")
            #expect(missing.status == 401 && missing.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            #expect(
                try await api.call(.POST, "/v1/purchases", token: "demo-token-0123456788", json: body, route: "POST /v1/purchases").status
                    == 401)
            #expect(
                try await api.call(
                    .POST, "/v1/purchases", headers: ["Authorization": "Basic ZGVtbzpkZW1v"], json: body, route: "POST /v1/purchases"
                )
                .status == 401)
            #expect(try await api.enqueuedCount() == 0)

            let jobId = try #require(try await api.call(.POST, "/v1/purchases", json: body).json["jobId"] as? String)
            #expect(
                try await api.call(.GET, "/v1/jobs/\(jobId)?wait=20", route: "GET /v1/jobs/{id}").json["status"] as? String == "succeeded")
            // Another publisher sees neither the job nor the customer.
            let other = try await api.call(.GET, "/v1/jobs/\(jobId)", token: APIStack.otherToken, route: "GET /v1/jobs/{id}")
            #expect(other.status == 404)
            #expect(try await api.call(.GET, "/v1/customers/ann@example.com/entitlements", token: APIStack.otherToken).status == 404)
            #expect(try await api.call(.GET, "/v1/customers/ann@example.com/entitlements").status == 200)
            // `other` names customers by username: an email is refused there.
            let otherPurchase = try await api.call(
                .POST, "/v1/purchases", token: APIStack.otherToken, json: ["customer": "ann smith", "transactionId": "1"],
                route: "POST /v1/purchases")
            #expect(otherPurchase.status == 400 && otherPurchase.message.contains("username"))

            // `limited`: two at once, then 429 with Retry-After.
            var statuses: [Int] = []
            var retryAfter: String?
            let lookup = "/v1/customers/nobody/entitlements"
            let route = "GET /v1/customers/{id}/entitlements"
            for _ in 0..<3 {
                let reply = try await api.call(.GET, lookup, token: APIStack.limitedToken, route: route)
                statuses.append(reply.status)
                retryAfter = reply.headers["retry-after"] ?? retryAfter
            }
            #expect(statuses == [404, 404, 429])
            #expect(retryAfter.flatMap(Int.init).map { (1...5).contains($0) } == true, "\(retryAfter ?? "none")")
            // The limit is per publisher: demo is unaffected.
            #expect(try await api.call(.GET, "/v1/customers/nobody%40example.com/entitlements", route: route).status == 404)
        }
    }
}
