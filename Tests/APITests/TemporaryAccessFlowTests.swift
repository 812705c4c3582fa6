import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// Apple's subscription statuses unreachable for ten minutes while customers buy: the signed transaction,
/// verified here, proves the purchase, so its job grants access provisionally on its second
/// attempt (past the first retry), says so in its answer, the customer's answers, the events
/// and the webhooks, and Apple asked again soon makes it final, or withdraws it when Apple
/// says the purchase was refunded meanwhile.
@Suite struct TemporaryAccessFlowTests {
    @Test(.timeLimit(.minutes(4))) func accessIsGrantedProvisionallyWhileAppleIsDownThenConfirmedOrWithdrawn() async throws {
        try await APIStack.runWithWebhooks("temporary-access", notify: [], sweep: true) { api, hooks in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            func appleDown() async throws {
                // Apple's statuses answer 503 for ten minutes of the App Store's clock.
                try await api.simulator(
                    "/simulator/faults", #"{"target":"serverAPI","status":503,"pathContains":"v1/subscriptions/","forSeconds":600}"#)
            }
            // Read a second after the (frozen) App Store now: what happened at this very moment
            // is in, whatever a millisecond of the clocks' rounding says.
            func subscription(_ customer: String) async throws -> [String: Any]? {
                let at = try await api.simulatorNow().addingTimeInterval(1)
                return (try await api.customer(customer, at: at)["subscriptions"] as? [[String: Any]])?.first
            }

            // Confirmed: Apple answers the check that follows.
            try await appleDown()
            let bought = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false, "environment": "Production"])
            let job = try await api.submit([
                "customer": "pia@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            let document = try await api.finished(job)
            #expect(document["status"] as? String == "succeeded" && document["attempt"] as? Int == 2, "\(document)")
            let result = try #require(document["result"] as? [String: Any])
            #expect(result["accessGranted"] as? Bool == true && result["provisional"] as? Bool == true, "\(result)")
            #expect(result["provisionalUntil"] != nil && (result["subscription"] as? [String: Any])?["provisionalUntil"] != nil)
            #expect(try await subscription("pia@example.com")?["provisionalUntil"] != nil, "Apple is still down")
            // Every answer about access ends with the grant (24 hours), not at Apple's expiry a
            // month on: clients cache `expiresAt`.
            let now = try await api.simulatorNow()
            let access = try await api.call(
                .GET, "/v1/customers/pia%40example.com/access/premium", route: "GET /v1/customers/{id}/access/{offerId}")
            let expiresAt = try #require(ISO8601DateFormatter().date(from: access.json["expiresAt"] as? String ?? ""), "\(access.text)")
            #expect(expiresAt <= now.addingTimeInterval(24 * 3600 + 60), "\(access.text)")
            let cleeng = try await api.call(
                .GET, "/cleeng/entitlements/pia@example.com", token: nil, headers: CompatibilityRouteTests.cleengHeaders,
                route: "GET /cleeng/entitlements/{customerEmail}")
            let items = cleeng.json["items"] as? [[String: Any]] ?? []
            let premium = items.first { $0["offerId"] as? String == "premium" }
            #expect(
                (premium?["expiresAt"] as? Double).map { $0 <= now.timeIntervalSince1970 + 24 * 3600 + 60 } == true, "\(cleeng.text)")
            // Apple is back: the check that keeps asking makes it final.
            try await api.advance(seconds: 11 * 60)
            try await eventually("Apple's answer confirms the purchase") {
                try await subscription("pia@example.com")?["provisionalUntil"] == nil
            }
            #expect(try await api.access("pia@example.com", "premium"))
            let events = try await api.events("pia@example.com")
            let granted = try #require(events.first { $0["type"] as? String == "temporary_access_granted" }, "\(events)")
            #expect(granted["provisional"] as? Bool == true && granted["provisionalUntil"] != nil)
            #expect(events.first { $0["type"] as? String == "initial_purchase" }?["provisional"] as? Bool == true)
            #expect(events.filter { $0["type"] as? String == "initial_purchase" }.count == 1, "confirming makes no second purchase")
            #expect(events.first { $0["type"] as? String == "temporary_access_resolved" }?["confirmed"] as? Bool == true, "\(events)")

            // Withdrawn: refunded at Apple while it was unreachable (the notification is lost too).
            try await appleDown()
            let refunded = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false, "environment": "Production"])
            let second = try await api.submit([
                "customer": "rex@example.com", "signedTransaction": try #require(refunded["signedTransaction"] as? String),
            ])
            let secondResult = try #require(try await api.finished(second)["result"] as? [String: Any])
            #expect(secondResult["provisional"] as? Bool == true, "\(secondResult)")
            try await api.simulator("/simulator/transactions/\(try #require(refunded["transactionId"] as? String))/refund", "{}")
            try await api.advance(seconds: 11 * 60)
            try await eventually("Apple's answer withdraws the purchase") {
                try await subscription("rex@example.com")?["status"] as? String == "revoked"
            }
            #expect(try await api.access("rex@example.com", "premium") == false)
            #expect(try await subscription("rex@example.com")?["provisionalUntil"] == nil)
            let withdrawn = try await api.events("rex@example.com")
            #expect(withdrawn.contains { $0["type"] as? String == "refund" })
            #expect(
                withdrawn.first { $0["type"] as? String == "temporary_access_resolved" }?["confirmed"] as? Bool == false, "\(withdrawn)")

            // Each webhook fits its schema; the grant reached the receiver.
            try await api.settle()
            let bodies = await hooks.entries.filter { $0.path == "/hooks" }.compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any]
            }
            #expect(
                bodies.filter { $0["event"] as? String == "temporary_access_granted" }.count == 2, "\(bodies.map { $0["event"] ?? "?" })")
            #expect(bodies.filter { $0["event"] as? String == "temporary_access_resolved" }.count == 2)
            for body in bodies {
                let problems = OpenAPIDocument.shared.checkWebhook(body)
                #expect(problems.isEmpty, "\(body["event"] ?? "?"): \(problems)")
            }
        }
    }

    /// A publisher that turns it off (temporaryAccessHours 0) waits for Apple: the job retries.
    @Test(.timeLimit(.minutes(3))) func aPublisherThatTurnsItOffWaitsForApple() async throws {
        try await APIStack.run(
            "temporary-access-off", worker: true, catalog: { publishers in publishers[0]["temporaryAccessHours"] = 0 }
        ) { api in
            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":503,"pathContains":"v1/subscriptions/","count":3}"#)
            let bought = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false, "environment": "Production"])
            let job = try await api.submit([
                "customer": "olga@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            let document = try await api.finished(job)
            let result = try #require(document["result"] as? [String: Any], "\(document)")
            #expect((document["attempt"] as? Int ?? 0) >= 4 && result["provisional"] == nil && result["accessGranted"] as? Bool == true)
        }
    }

    /// Apple timing the request out (408) says nothing about the purchase, verified here: the
    /// job is retried, with temporary access on its second attempt, as while Apple is down.
    /// Apple refusing this server's key (401) says nothing about it either: the job fails for
    /// operators to see, and the customer is not told the proof is bad (`invalidReceipt`).
    @Test(.timeLimit(.minutes(3))) func appleRefusingTheKeyOrTimingOutRefusesNoPurchase() async throws {
        try await APIStack.run("temporary-access-key", worker: true) { api in
            func submit(_ customer: String, failing status: Int) async throws -> [String: Any] {
                try await api.simulator(
                    "/simulator/faults", #"{"target":"serverAPI","status":\#(status),"pathContains":"v1/subscriptions/","count":2}"#)
                let bought = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false, "environment": "Production"])
                return try await api.finished(
                    try await api.submit(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)]))
            }
            let timedOut = try await submit("late@example.com", failing: 408)
            let granted = try #require(timedOut["result"] as? [String: Any], "\(timedOut)")
            #expect(granted["accessGranted"] as? Bool == true && (timedOut["attempt"] as? Int ?? 0) >= 2, "\(timedOut)")
            let refusedKey = try await submit("key@example.com", failing: 401)
            #expect(refusedKey["status"] as? String == "failed", "\(refusedKey)")
            #expect((refusedKey["lastError"] as? String ?? "").contains("key"), "\(refusedKey)")
            #expect((refusedKey["result"] as? [String: Any])?["reason"] == nil, "no refusal of the purchase: \(refusedKey)")
        }
    }
}
