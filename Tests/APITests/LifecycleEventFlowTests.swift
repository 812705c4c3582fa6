import Foundation
import HTTPTestSupport
import Hummingbird
import RedisTestSupport
import Testing

/// Every lifecycle event type, made to happen through the simulator, the API and a worker:
/// each is in the customer's events (`GET /v1/customers/{id}/events`) with what it says, and
/// reached the publisher's webhook once, in a body that fits its schema in docs/openapi.json.
@Suite struct LifecycleEventFlowTests {
    static let day = 86_400.0

    /// The walk: the steps that make each type, then the checks.
    @Test(.timeLimit(.minutes(8))) func everyEventTypeIsLoggedAndPostedAsItsSchemaSays() async throws {
        try await APIStack.runWithWebhooks("lifecycle-events") { api, hooks in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            func claim(_ bought: [String: Any], _ customer: String) async throws -> [String: Any] {
                try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            }
            func subscription(_ original: String, _ action: String, _ body: String = "{}") async throws {
                try await api.simulator("/simulator/subscriptions/\(original)/\(action)", body)
                try await api.settle()
            }
            func advance(days: Double) async throws {
                try await api.advance(seconds: days * Self.day)
                try await api.settle()
            }

            // Ann: a free week, converted, cancelled and back, extended, a price increase, a
            // downgrade at renewal, an upgrade, billing trouble and recovery, a refund and its reversal.
            let ann = "ann@example.com"
            let trial = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(trial["originalTransactionId"] as? String)
            _ = try await claim(trial, ann)
            try await api.settle()
            try await advance(days: 8)
            try await subscription(original, "auto-renew-off")
            try await subscription(original, "auto-renew-on")
            try await subscription(original, "extend", #"{"days":3}"#)
            try await subscription(original, "price-increase", #"{"price":12.99,"requiresConsent":true}"#)
            try await subscription(original, "price-increase-consent", #"{"accept":true}"#)
            try await subscription(original, "downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            try await advance(days: 34)
            try await subscription(original, "upgrade", #"{"productId":"com.entitle.demo.premium.monthly"}"#)
            try await subscription(original, "billing-failure")
            try await advance(days: 31)
            try await advance(days: 17)
            try await subscription(original, "billing-recovery")
            let latest = try #require(
                (try await api.simulator("/simulator/subscriptions/\(original)")["transactionIds"] as? [String])?.last)
            try await api.simulator("/simulator/transactions/\(latest)/refund", #"{"percentage":50000}"#)
            try await api.settle()
            try await api.simulator("/simulator/transactions/\(latest)/refund-reversed", "{}")
            try await api.settle()

            // Bob: paid from the first day, cancelled, expired.
            let bob = "bob@example.com"
            let basic = try await api.buy("basic.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let bobs = try #require(basic["originalTransactionId"] as? String)
            _ = try await claim(basic, bob)
            try await subscription(bobs, "auto-renew-off")
            try await advance(days: 32)

            // Carol: credits bought, some spent, refunded (what is left is clawed back).
            let carol = "carol@example.com"
            let credits = try await api.buy("credits.100", extra: ["environment": "Production"])
            _ = try await claim(credits, carol)
            let spend = try await api.call(
                .POST, "/v1/customers/carol%40example.com/credits/spend", json: ["amount": 30, "reference": "call-1"],
                route: "POST /v1/customers/{id}/credits/spend")
            _ = try await api.result(try #require(spend.json["jobId"] as? String))
            try await api.simulator("/simulator/transactions/\(try #require(credits["transactionId"] as? String))/refund", "{}")
            try await api.settle()

            // Dave buys an issue, the publisher moves it to Erin; Frank's family access is revoked.
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            _ = try await claim(issue, "dave@example.com")
            _ = try await api.transfer(
                try #require(issue["originalTransactionId"] as? String), to: "erin@example.com", from: "dave@example.com")
            let family = try await api.buy("premium.monthly", extra: ["environment": "Production", "familyShared": true])
            _ = try await claim(family, "frank@example.com")
            try await api.simulator("/simulator/transactions/\(try #require(family["transactionId"] as? String))/revoke", "{}")
            try await api.settle()

            // What each customer's log says.
            var logged: [String: [[String: Any]]] = [:]
            for customer in [ann, bob, carol, "dave@example.com", "erin@example.com", "frank@example.com"] {
                logged[customer] = try await api.events(customer)
            }
            func find(_ customer: String, _ type: String, _ check: ([String: Any]) -> Bool = { _ in true }) -> [String: Any]? {
                logged[customer]?.first { $0["type"] as? String == type && check($0) }
            }
            #expect(find(ann, "trial_started") { $0["priceMilliunits"] as? Int == 0 } != nil)
            #expect(find(ann, "offer_redeemed") { $0["offerKind"] as? String == "introductory" } != nil)
            #expect(find(ann, "trial_converted") { $0["priceMilliunits"] as? Int == 9_990 && $0["currency"] as? String == "USD" } != nil)
            #expect(find(ann, "cancellation") { $0["reason"] as? String == "voluntary" } != nil)
            #expect(find(ann, "uncancellation") != nil)
            #expect(find(ann, "extension") { $0["previousExpiresDate"] != nil } != nil)
            #expect(find(ann, "price_increase") { $0["consented"] as? Bool == false } != nil)
            #expect(find(ann, "price_increase") { $0["consented"] as? Bool == true } != nil)
            #expect(
                find(ann, "product_change") { $0["effective"] as? String == "atRenewal" && $0["change"] as? String == "downgrade" } != nil)
            #expect(find(ann, "renewal") { $0["fromProductId"] as? String == "com.entitle.demo.premium.monthly" } != nil)
            #expect(
                find(ann, "product_change") { $0["effective"] as? String == "immediate" && $0["change"] as? String == "upgrade" } != nil)
            #expect(find(ann, "billing_issue") != nil && find(ann, "grace_period_started") { $0["gracePeriodExpiresDate"] != nil } != nil)
            #expect(find(ann, "grace_period_expired") != nil && find(ann, "billing_recovered") != nil)
            #expect(find(ann, "refund") { $0["revocationPercentage"] as? Int == 50_000 && $0["refundMilliunits"] != nil } != nil)
            #expect(find(ann, "refund_reversed") != nil)
            #expect(find(bob, "initial_purchase") { $0["priceMilliunits"] as? Int == 4_990 } != nil)
            #expect(find(bob, "expiration") { $0["reason"] as? String == "voluntary" } != nil)
            #expect(find(carol, "non_renewing_purchase") { $0["priceMilliunits"] as? Int == 990 } != nil)
            #expect(find(carol, "credits_granted") { $0["amount"] as? Int == 100 && $0["balance"] as? Int == 100 } != nil)
            #expect(find(carol, "credits_spent") { $0["amount"] as? Int == 30 && $0["reference"] as? String == "call-1" } != nil)
            #expect(find(carol, "credits_clawed_back") { $0["amount"] as? Int == 70 && $0["shortfall"] as? Int == 30 } != nil)
            #expect(
                find("erin@example.com", "transfer") { $0["from"] as? String == "dave@example.com" && $0["road"] as? String == "secretKey" }
                    != nil)
            #expect(find("frank@example.com", "revoked") { $0["familyShared"] as? Bool == true } != nil)
            let seen = Set(logged.values.flatMap { $0.compactMap { $0["type"] as? String } })
            let every: Set<String> = [
                "initial_purchase", "trial_started", "trial_converted", "renewal", "product_change", "cancellation", "uncancellation",
                "billing_issue", "grace_period_started", "grace_period_expired", "billing_recovered", "expiration", "refund",
                "refund_reversed", "revoked", "transfer", "non_renewing_purchase", "extension", "offer_redeemed", "price_increase",
                "credits_granted", "credits_spent", "credits_clawed_back",
            ]
            #expect(every.subtracting(seen).isEmpty, "types never made: \(every.subtracting(seen).sorted())")
            // Newest first, versions never going back in time order.
            for (customer, events) in logged {
                let versions = events.compactMap { $0["customerVersion"] as? Int }
                #expect(versions == versions.sorted(by: >), "\(customer)'s events are newest first: \(versions)")
            }

            // Each event reached the webhook once, as its schema says.
            let expected = logged.values.reduce(0) { $0 + $1.count }
            let deliveries = await hooks.wait(for: "/hooks", count: expected, timeout: .seconds(60))
            var delivered: [String: Int] = [:]
            for entry in deliveries {
                let body = try #require(try JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any])
                let problems = OpenAPIDocument.shared.checkWebhook(body)
                #expect(problems.isEmpty, "\(body["event"] ?? "?"): \(problems)")
                #expect(body["type"] as? String == body["event"] as? String, "typeNames lifecycle: type is the lifecycle name")
                delivered[body["id"] as? String ?? "", default: 0] += 1
            }
            let ids = Set(logged.values.flatMap { $0.compactMap { $0["id"] as? String } })
            #expect(Set(delivered.keys) == ids, "every logged event was posted, and nothing else")
            #expect(delivered.values.allSatisfy { $0 == 1 }, "each once: \(delivered.filter { $0.value > 1 })")
            print("lifecycle events: \(expected) logged for \(logged.count) customers, \(seen.count) types, \(deliveries.count) webhooks")
        }
    }
}

/// Receivers of other services complain that events arrive out of order and can race the
/// store's write. A receiver that does what docs/entitlements.md says ("Receiving webhooks")
/// ends right when deliveries come out of order.
@Suite struct WebhookOrderTests {
    /// What docs/entitlements.md tells a receiver to do: keep, per customer, the highest
    /// `customerVersion` applied; a delivery at or below it is history (recorded, never
    /// applied to access); one above it sets the customer's access to its `entitlements`.
    struct DocumentedReceiver {
        var versions: [String: Int] = [:]
        var access: [String: [String]] = [:]
        var history: [String] = []

        mutating func receive(_ body: [String: Any]) {
            guard let customer = body["customer"] as? String, let version = body["customerVersion"] as? Int else { return }
            history.append(body["id"] as? String ?? "")
            guard version > versions[customer] ?? 0 else { return }
            versions[customer] = version
            access[customer] = body["entitlements"] as? [String] ?? []
        }
    }

    /// Refuses the first delivery it is sent (a receiver down for a moment), so that it comes
    /// again later, after the next change's.
    actor FlakyOnce {
        var refused: String?
        func answer(_ entry: RequestLog.Entry) -> HTTPResponse.Status {
            guard refused == nil, let body = try? JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any] else { return .ok }
            refused = body["id"] as? String
            return .serviceUnavailable
        }
    }

    @Test(.timeLimit(.minutes(3))) func aReceiverThatFollowsTheDocumentationEndsRightWhenDeliveriesComeOutOfOrder() async throws {
        let flaky = FlakyOnce()
        try await APIStack.runWithWebhooks("webhook-order", answer: { await flaky.answer($0) }) { api, hooks in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            _ = try await api.claim([
                "customer": "ann@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            // The first delivery (the purchase, access granted) was refused; the refund's
            // (access gone) arrives before it comes again.
            try await api.simulator("/simulator/transactions/\(try #require(bought["transactionId"] as? String))/refund", "{}")
            try await api.settle(timeout: .seconds(90))
            let deliveries = await hooks.wait(for: "/hooks", count: 4, timeout: .seconds(60))
            let bodies = deliveries.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }
            let versions = bodies.compactMap { $0["customerVersion"] as? Int }
            #expect(versions != versions.sorted(), "the deliveries came out of order: \(versions)")
            var receiver = DocumentedReceiver()
            for body in bodies { receiver.receive(body) }
            let access = receiver.access
            #expect(access["ann@example.com"] == [], "the refund's answer stands: \(access)")
            // Accepted after the newer one, the purchase is history, not access.
            let naive = bodies.last?["entitlements"] as? [String]
            #expect(naive == ["hd", "premium"], "applying whatever came last would give access back: \(naive ?? [])")
            #expect(try await api.customer("ann@example.com")["entitlements"] as? [String] == [])
        }
    }
}
