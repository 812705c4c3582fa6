import Foundation
import RedisTestSupport
import Testing

/// The routes apps built for other services call: Cleeng's `/apple/payment` and Cloud
/// Softphone's validation web service.
@Suite struct CompatibilityRouteTests {
    static var basic: String { "Basic " + Data(APIStack.cleengBasic.utf8).base64EncodedString() }
    static var cleengHeaders: [String: String] { ["X-Publisher-Token": APIStack.demoToken, "Authorization": basic] }

    @Test func cleengPaymentQueuesTheReceiptAndChecksItsCredentials() async throws {
        try await APIStack.run("cleeng", worker: true) { api in
            let bought = try await api.buy("premium.monthly")
            let receipt: [String: Any] = [
                "transactionId": try #require(bought["transactionId"] as? String),
                "receiptData": try #require(bought["appReceipt"] as? String),
            ]
            let body: [String: Any] = [
                "customerEmail": "ann@example.com", "offerId": "premium", "receipt": receipt, "appType": "ios", "ipAddress": "10.0.0.1",
            ]
            let ok = try await api.call(
                .POST, "/apple/payment", token: nil, headers: Self.cleengHeaders, json: body, route: "POST /apple/payment")
            #expect(ok.status == 200 && ok.json["message"] as? String == "OK")
            let jobId = try #require(ok.json["jobId"] as? String)
            let job = try await api.call(.GET, "/v1/jobs/\(jobId)?wait=20", route: "GET /v1/jobs/{id}")
            let result = job.json["result"] as? [String: Any]
            #expect(result?["accessGranted"] as? Bool == true, "\(job.text)")

            func status(_ headers: [String: String], _ body: [String: Any]) async throws -> (Int, String) {
                let reply = try await api.call(
                    .POST, "/apple/payment", token: nil, headers: headers, json: body, route: "POST /apple/payment")
                return (reply.status, reply.message)
            }
            let before = try await api.enqueuedCount()
            #expect(try await status(["Authorization": Self.basic], body).0 == 401)
            #expect(try await status(["X-Publisher-Token": APIStack.demoToken], body).0 == 401)
            let wrongPassword = "Basic " + Data("demo-user:wrong".utf8).base64EncodedString()
            #expect(try await status(["X-Publisher-Token": APIStack.demoToken, "Authorization": wrongPassword], body).0 == 401)
            #expect(try await status(["X-Publisher-Token": "nope", "Authorization": Self.basic], body).0 == 401)
            // Another publisher's token with demo's Basic credentials.
            #expect(try await status(["X-Publisher-Token": APIStack.otherToken, "Authorization": Self.basic], body).0 == 401)
            var tvos = body
            tvos["appType"] = "android"
            #expect(try await status(Self.cleengHeaders, tvos) == (400, "appType must be ios or tvos"))
            var noReceipt = body
            noReceipt["receipt"] = nil
            #expect(try await status(Self.cleengHeaders, noReceipt) == (400, "receipt is required"))
            var badEmail = body
            badEmail["customerEmail"] = "ann"
            #expect(try await status(Self.cleengHeaders, badEmail).0 == 400)
            var unknownOffer = body
            unknownOffer["offerId"] = "gold"
            #expect(try await status(Self.cleengHeaders, unknownOffer) == (422, "publisher demo has no offer gold"))
            #expect(try await api.enqueuedCount() == before)
        }
    }

    @Test func cleengReadCallsAnswerAccessEntitlementsAndTagsWithPaymentsContract() async throws {
        try await APIStack.run("cleeng-read", worker: true) { api in
            // An issue, then a subscription with the same Apple account: the app's receipt holds both.
            let issue = try await api.buy("issue.2026.11", account: "ann-account", extra: ["environment": "Production"])
            #expect(issue["transactionId"] != nil)
            let bought = try await api.buy("premium.monthly", account: "ann-account", extra: ["environment": "Production"])
            let payment: [String: Any] = [
                "customerEmail": "ann@example.com", "offerId": "premium", "appType": "ios",
                "receipt": [
                    "transactionId": try #require(bought["transactionId"] as? String),
                    "receiptData": try #require(bought["appReceipt"] as? String),
                ],
            ]
            let paid = try await api.call(
                .POST, "/apple/payment", token: nil, headers: Self.cleengHeaders, json: payment, route: "POST /apple/payment")
            _ = try await api.result(try #require(paid.json["jobId"] as? String))
            let now = try await api.simulatorNow().timeIntervalSince1970

            func get(_ path: String, _ route: String, headers: [String: String] = Self.cleengHeaders) async throws -> APIStack.Reply {
                try await api.call(.GET, path, token: nil, headers: headers, route: route)
            }
            let one = "GET /cleeng/entitlements/{customerEmail}/{offerId}"
            let premium = try await get("/cleeng/entitlements/ann%40example.com/premium", one)
            #expect(
                premium.status == 200 && premium.json["accessGranted"] as? Bool == true
                    && premium.json["grantType"] as? String == "purchase")
            #expect((premium.json["expiresAt"] as? Int).map { Double($0) > now } == true, "\(premium.text)")
            let basic = try await get("/cleeng/entitlements/ann@example.com/basic", one)
            #expect(basic.json["accessGranted"] as? Bool == false && basic.json["expiresAt"] is NSNull)

            let list = try await get("/cleeng/entitlements/ann@example.com", "GET /cleeng/entitlements/{customerEmail}")
            let items = try #require(list.json["items"] as? [[String: Any]])
            #expect(items.map { $0["offerId"] as? String } == ["issue-2026-11", "premium"], "\(list.text)")
            #expect(items.allSatisfy { $0["accessGranted"] as? Bool == true })
            #expect(items.first?["expiresAt"] is NSNull, "an issue is for ever")

            let tags = try await get("/cleeng/accessible-tags/ann@example.com", "GET /cleeng/accessible-tags/{customerEmail}")
            #expect(tags.json["tags"] as? [String] == ["hd", "issue:2026-11", "premium"], "\(tags.text)")
            // Before the purchases: nothing.
            let before = try await get(
                "/cleeng/accessible-tags/ann@example.com?at=2020-01-01T00:00:00Z", "GET /cleeng/accessible-tags/{customerEmail}")
            #expect(before.json["tags"] as? [String] == [])
            // A customer who never bought has no access (not an error).
            let nobody = try await get("/cleeng/entitlements/nobody@example.com", "GET /cleeng/entitlements/{customerEmail}")
            #expect(nobody.status == 200 && (nobody.json["items"] as? [Any])?.isEmpty == true)

            // The payment route's contract: 401, 400, 422, each with a message.
            let wrong = "Basic " + Data("demo-user:wrong".utf8).base64EncodedString()
            let refusals: [(String, [String: String], Int, String)] = [
                ("/cleeng/entitlements/ann@example.com/premium", ["Authorization": Self.basic], 401, "X-Publisher-Token"),
                (
                    "/cleeng/entitlements/ann@example.com", ["X-Publisher-Token": APIStack.demoToken, "Authorization": wrong], 401,
                    "not valid"
                ),
                (
                    "/cleeng/accessible-tags/ann@example.com", ["X-Publisher-Token": APIStack.otherToken, "Authorization": Self.basic], 401,
                    "not valid"
                ),
                ("/cleeng/entitlements/ann/premium", Self.cleengHeaders, 400, "email"),
                ("/cleeng/accessible-tags/ann@example.com?at=yesterday", Self.cleengHeaders, 400, "ISO 8601"),
                ("/cleeng/entitlements/ann@example.com/gold", Self.cleengHeaders, 422, "no offer gold"),
            ]
            for (path, headers, status, message) in refusals {
                let route =
                    path.hasPrefix("/cleeng/accessible-tags")
                    ? "GET /cleeng/accessible-tags/{customerEmail}"
                    : path.split(separator: "/").count == 4 ? one : "GET /cleeng/entitlements/{customerEmail}"
                let reply = try await get(path, route, headers: headers)
                #expect(reply.status == status && reply.message.contains(message), "\(path): \(reply.status) \(reply.text)")
            }
        }
    }

    /// Cleeng's route and /v1/validate wait for another request's job about the same
    /// transaction, then queue their own; while that job is still running after the wait they
    /// answer 409 with Retry-After, never with the other request's job (another customer's
    /// verdict, credits and job id).
    @Test func aRequestWhoseTransactionIsBusyAfterTheWaitIsNotAnsweredWithAnotherRequestsJob() async throws {
        // No worker: the first request's job stays queued.
        try await APIStack.run("busy-transaction", worker: false, configure: { $0.maxWait = .seconds(3) }) { api in
            let bought = try await api.buy("premium.monthly")
            let receipt: [String: Any] = [
                "transactionId": try #require(bought["transactionId"] as? String),
                "receiptData": try #require(bought["appReceipt"] as? String),
            ]
            func pay(_ customer: String) async throws -> APIStack.Reply {
                try await api.call(
                    .POST, "/apple/payment", token: nil, headers: Self.cleengHeaders,
                    json: ["customerEmail": customer, "offerId": "premium", "receipt": receipt, "appType": "ios"],
                    route: "POST /apple/payment")
            }
            let ann = try await pay("ann@example.com")
            #expect(ann.status == 200, "\(ann.text)")
            let annsJob = try #require(ann.json["jobId"] as? String)
            #expect(try await pay("ann@example.com").json["jobId"] as? String == annsJob, "an exact repeat is the same job")

            let bob = try await pay("bob@example.com")
            #expect(bob.status == 409 && bob.json["error"] as? String == "inFlight", "\(bob.text)")
            #expect(bob.headers["retry-after"] == "2")
            #expect(!bob.text.contains(annsJob), "\(bob.text)")

            let validated = try await api.call(
                .POST, "/v1/validate", headers: ["Accept": "application/json"],
                json: [
                    "token": APIStack.demoToken, "username": "carol@example.com", "receipt": receipt["receiptData"] as Any,
                    "transactionId": receipt["transactionId"] as Any, "product": "com.entitle.demo.premium.monthly",
                ], route: "POST /v1/validate")
            #expect(validated.status == 409 && validated.json["result"] as? String == "error", "\(validated.text)")
            #expect(validated.json["jobId"] == nil && !validated.text.contains(annsJob), "\(validated.text)")
            #expect(try await api.enqueuedCount() == 1, "only ann's job was queued")
        }
    }

    @Test func validateWaitsForTheVerdictInXMLJSONOrAForm() async throws {
        try await APIStack.run("validate", worker: true) { api in
            let bought = try await api.buy("credits.100", account: "alice-account")
            let receipt = try #require(bought["appReceipt"] as? String)
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            let encoded = try #require(receipt.addingPercentEncoding(withAllowedCharacters: allowed))

            // GET with query parameters, the token among them: XML by default.
            let query = "username=alice%40example.com&receipt=\(encoded)&product=com.entitle.demo.credits.100&price=0.99&currency=USD"
            let xml = try await api.call(.GET, "/v1/validate?\(query)&token=\(APIStack.demoToken)", token: nil, route: "GET /v1/validate")
            #expect(xml.status == 200, "\(xml.text)")
            #expect(xml.headers["content-type"]?.hasPrefix("application/xml") == true)
            #expect(xml.text.contains("<result>ok</result>") && xml.text.contains("<credits>100</credits>"), "\(xml.text)")

            // The same again, as a form, answered in JSON: the same verdict (a new claim, credited once).
            let json = try await api.call(
                .POST, "/v1/validate", headers: ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"],
                body: query,
                route: "POST /v1/validate")
            #expect(json.status == 200 && json.json["result"] as? String == "ok" && json.json["credits"] as? Int == 100, "\(json.text)")

            // JSON in, a form out.
            let form = try await api.call(
                .POST, "/v1/validate", headers: ["Accept": "application/x-www-form-urlencoded"],
                json: ["username": "alice@example.com", "receipt": receipt, "product": "com.entitle.demo.credits.100"],
                route: "POST /v1/validate")
            #expect(form.status == 200 && form.text.hasPrefix("result=ok&message=Purchase%20verified."), "\(form.text)")

            // Refusals carry a message for the app to show, in the asked format.
            let unknown = try await api.call(
                .GET, "/v1/validate?username=alice%40example.com&receipt=\(encoded)&product=com.example.nope", route: "GET /v1/validate")
            #expect(unknown.status == 403 && unknown.text.contains("<message>This product cannot be bought here.</message>"))
            let notBought = try await api.call(
                .GET, "/v1/validate?username=alice%40example.com&receipt=\(encoded)&product=com.entitle.demo.issue.2026.11",
                headers: ["Accept": "application/json"], route: "GET /v1/validate")
            #expect(notBought.status == 403 && notBought.json["result"] as? String == "error", "\(notBought.text)")
            #expect(!(notBought.json["message"] as? String ?? "").isEmpty)
            let badInput = try await api.call(
                .GET, "/v1/validate?username=alice%40example.com&product=com.entitle.demo.credits.100",
                headers: ["Accept": "application/json"], route: "GET /v1/validate")
            #expect(badInput.status == 400 && badInput.json["message"] as? String == "receipt is required")
            let noToken = try await api.call(.GET, "/v1/validate?\(query)", token: nil)
            #expect(noToken.status == 401 && noToken.text.contains("<result>error</result>"))
            // A publisher configured for JSON gets JSON without asking.
            let other = try await api.call(.GET, "/v1/validate?username=alice&product=x&receipt=\(encoded)", token: APIStack.otherToken)
            #expect(other.status == 403 && other.headers["content-type"]?.hasPrefix("application/json") == true)
        }
    }
}
