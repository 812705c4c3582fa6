import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// What was seen when the API was tried as a hostile client, each as it was reproduced.
@Suite struct PublicSurfaceTests {
    /// A question about a date 64 bits of milliseconds cannot hold ended the process.
    @Test func aDateBeyondWhatMillisecondsHoldIsRefusedAndTheProcessLives() async throws {
        try await APIStack.run("dates", worker: true) { api in
            let bought = try await api.buy("premium.monthly")
            let body: [String: Any] = ["customer": "ann@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String)]
            let job = try #require(try await api.call(.POST, "/v1/purchases", json: body).json["jobId"] as? String)
            _ = try await api.call(.GET, "/v1/jobs/\(job)?wait=20")
            let route = "GET /v1/customers/{id}/entitlements"
            for at in [
                "9223372036854775807", "-9223372036854775808", "253402300800000", "-1", "1e308", "NaN", "99999-01-01T00:00:00Z",
                String(repeating: "9", count: 400),
            ] {
                let reply = try await api.call(
                    .GET, "/v1/customers/ann@example.com/entitlements?at=\(at.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? at)",
                    route: route)
                #expect(reply.status == 400 && reply.message.contains("between 1970 and 9999"), "at=\(at.prefix(30)): \(reply.status)")
                let access = try await api.call(.GET, "/v1/customers/ann@example.com/access/premium?at=\(at.prefix(60))")
                #expect(access.status == 400)
            }
            // The edges of the range are answered.
            #expect(try await api.call(.GET, "/v1/customers/ann@example.com/entitlements?at=0", route: route).status == 200)
            #expect(try await api.call(.GET, "/v1/customers/ann@example.com/entitlements?at=253402300799999", route: route).status == 200)
            #expect(try await api.call(.GET, "/healthz", token: nil).status == 200, "the process is alive")
        }
    }

    /// Garbage posted to the notification route spent the publisher's own budget.
    @Test func unauthenticatedGarbageNeverSpendsAPublishersBudget() async throws {
        try await APIStack.run("budget") { api in
            // `limited` allows two requests at once, one per 5 s after that.
            for _ in 0..<50 {
                let reply = try await api.call(.POST, "/v1/notifications/apple/limited", token: nil, body: #"{"notification_type":"x"}"#)
                #expect(reply.status == 400)
            }
            let route = "GET /v1/customers/{id}/entitlements"
            var statuses: [Int] = []
            for _ in 0..<3 { statuses.append(try await api.call(.GET, "/v1/customers/nobody/entitlements", token: APIStack.limitedToken, route: route).status) }
            #expect(statuses == [404, 404, 429], "the publisher's own budget is whole")
        }
    }

    /// A client that keeps failing is slowed (429), while authenticated callers from the same
    /// address are not.
    @Test func refusedRequestsAreLimitedPerAddressNotAuthenticatedOnes() async throws {
        try await APIStack.run("failures", configure: { $0.failedAuthenticationLimit = (0.01, 5) }) { api in
            var statuses: [Int] = []
            for _ in 0..<8 { statuses.append(try await api.call(.GET, "/v1/customers/x%40y.com/entitlements", token: "guess").status) }
            #expect(statuses == [401, 401, 401, 401, 401, 429, 429, 429])
            let garbage = try await api.call(.POST, "/v1/notifications/apple/demo", token: nil, body: "garbage")
            #expect(garbage.status == 429 && garbage.headers["retry-after"] != nil, "refused before it is even read")
            #expect(try await api.call(.GET, "/v1/customers/x%40y.com/entitlements").status == 404, "the key holder is served")
        }
    }

    /// Any JSON with a string `notification_type` was queued, unverified, whole.
    @Test func notificationsAreVerifiedBeforeAnythingIsWritten() async throws {
        try await APIStack.run("notify-door", worker: true) { api in
            let bought = try await api.buy("premium.monthly")
            let v1 = try #require(await api.inbox.wait(for: "/v1", count: 1).first)
            var genuine = try #require(try JSONSerialization.jsonObject(with: Data(v1.body)) as? [String: Any])
            let route = "POST /v1/notifications/apple/{publisherId}"
            let before = try await api.keys()
            func post(_ object: Any) async throws -> APIStack.Reply {
                let text = String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
                return try await api.call(.POST, "/v1/notifications/apple/demo", token: nil, body: text, route: route)
            }
            // V1 without the app's shared secret, or with another one, or for no app of the publisher.
            var wrong = genuine
            wrong["password"] = "not-the-secret"
            var missing = genuine
            missing["password"] = nil
            var longer = genuine
            longer["password"] = (genuine["password"] as? String ?? "") + String(repeating: "\u{0}", count: 256)
            var strange = genuine
            strange["bid"] = "com.example.other"
            var huge = wrong
            huge["unified_receipt"] = ["latest_receipt": String(repeating: "A", count: 760 << 10)]
            for (name, body, status) in [
                ("wrong password", wrong, 400), ("no password", missing, 400), ("the secret and 256 NULs", longer, 400),
                ("another publisher's app", strange, 400), ("760 KB", huge, 413),
                ("any notification_type", ["notification_type": "DID_RENEW"] as [String: Any], 400),
            ] {
                let reply = try await post(body)
                #expect(reply.status == status && !reply.message.isEmpty, "\(name): \(reply.status) \(reply.text)")
            }
            // Apple-signed, but not a notification: a signed transaction and a renewal info.
            let transaction = try #require(bought["signedTransaction"] as? String)
            let renewal = try #require(bought["signedRenewalInfo"] as? String)
            for signed in [transaction, renewal] {
                let reply = try await post(["signedPayload": signed])
                #expect(reply.status == 400 && reply.message.contains("not a notification"), "\(reply.text)")
            }
            #expect(try await api.keys() == before, "a refused notification writes nothing")

            // The genuine one is queued, without the secret.
            let accepted = try await post(genuine)
            #expect(accepted.status == 200)
            let acceptedId = try #require(accepted.json["jobId"] as? String)
            let record = try #require(try await api.jobQueue.job(id: acceptedId, queue: "default"))
            let secret = try #require(genuine["password"] as? String)
            #expect(!record.payload.contains(secret), "the shared secret is not kept in the job")
            let job = try await api.call(.GET, "/v1/jobs/\(record.id)?wait=20")
            #expect(job.json["status"] as? String == "succeeded", "\(job.text)")
            genuine["password"] = nil
        }
    }

    /// The smaller leaks: waiting on another publisher's job, a sandbox transaction for a
    /// production-only app, the dashboard's policy.
    @Test func anotherPublishersJobAnswersAtOnceAndEnvironmentsAreCheckedAtTheDoor() async throws {
        try await APIStack.run("leaks") { api in
            let bought = try await api.buy("credits.100")
            let body: [String: Any] = ["customer": "ann@example.com", "transactionId": try #require(bought["transactionId"] as? String)]
            let job = try #require(try await api.call(.POST, "/v1/purchases", json: body).json["jobId"] as? String)
            // No worker: the job stays queued. Another publisher asking to wait gets 404 at once.
            let started = ContinuousClock.now
            let other = try await api.call(.GET, "/v1/jobs/\(job)?wait=30", token: APIStack.otherToken, route: "GET /v1/jobs/{id}")
            #expect(other.status == 404)
            #expect(ContinuousClock.now - started < .seconds(15), "no wait before the ownership check")

            let dashboard = try await api.call(.GET, "/dashboard", token: nil)
            let policy = try #require(dashboard.headers["content-security-policy"])
            #expect(!policy.contains("unsafe-inline") && policy.contains("frame-ancestors 'none'"), "\(policy)")
            #expect(dashboard.headers["x-frame-options"] == "DENY" && !dashboard.text.contains("<script>"))
            #expect(try await api.call(.GET, "/dashboard/app.js", token: nil).text.contains("use strict"))
        }
        try await APIStack.run("production-only", catalog: { publishers in
            var apps = publishers[0]["apps"] as? [[String: Any]] ?? []
            apps[0]["environments"] = ["Production"]
            publishers[0]["apps"] = apps
        }) { api in
            let sandbox = try #require(try await api.buy("credits.100")["signedTransaction"] as? String)
            let reply = try await api.call(
                .POST, "/v1/purchases", json: ["customer": "ann@example.com", "signedTransaction": sandbox], route: "POST /v1/purchases")
            #expect(reply.status == 422 && reply.json["error"] as? String == "wrongEnvironment", "\(reply.text)")
            #expect(try await api.enqueuedCount() == 0)
        }
    }

    /// A transfer of what nobody holds is refused, and leaves no key for ever.
    @Test func aRefusedTransferLeavesNoKeyWithoutAnExpiry() async throws {
        try await APIStack.run("fence", worker: true) { api in
            let reply = try await api.call(
                .POST, "/v1/transfers", json: ["originalTransactionId": "2000000999999999", "to": "bob@example.com"],
                route: "POST /v1/transfers")
            let job = try #require(reply.json["jobId"] as? String)
            let finished = try await api.call(.GET, "/v1/jobs/\(job)?wait=20")
            #expect(finished.json["status"] as? String == "failed" && (finished.json["lastError"] as? String ?? "").contains("notHeld"))
            for key in try await api.keys().keys where key.contains(":ent:") {
                let ttl = try await api.jobQueue.redis.send(["PTTL", key]).int ?? -2
                #expect(ttl > 0, "\(key) expires")
            }
        }
    }
}
