import EntitleCore
import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// Every kind of V2 notification the simulator sends, posted to the notification route as
/// Apple would and run by the worker: each is applied, turned into a refund job, or recorded
/// and left on purpose, as docs/entitlements.md ("Notification types") says; a notification
/// again is a duplicate. `RESCIND_CONSENT` reaches the webhook as `consent_rescinded`.
@Suite struct NotificationTypesFlowTests {
    @Test(.timeLimit(.minutes(4))) func eachTypeIsHandledAsTheTableSays() async throws {
        try await APIStack.runWithWebhooks("notification-types", notify: []) { api, hooks in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            var seen: [String: String] = [:]  // TYPE/SUBTYPE: handling
            var forwarded: Set<String> = []
            /// Forwards the notifications a control call reports; their results.
            @discardableResult
            func sent(_ answer: [String: Any]) async throws -> [[String: Any]] {
                var results: [[String: Any]] = []
                let uuids = (answer["notifications"] as? [String]) ?? (answer["notificationUUID"] as? String).map { [$0] } ?? []
                for uuid in uuids where !forwarded.contains(uuid) {
                    forwarded.insert(uuid)
                    let result = try await api.forward(try await api.sentNotification(uuid))
                    let name = (result["notificationType"] as? String ?? "?") + ((result["subtype"] as? String).map { "/" + $0 } ?? "")
                    seen[name] = result["handling"] as? String ?? "none"
                    results.append(result)
                }
                try await api.settle()
                return results
            }
            let customer = "tia@example.com"
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            try await sent(bought)
            func subscription(_ action: String, _ body: String = "{}") async throws {
                try await sent(try await api.simulator("/simulator/subscriptions/\(original)/\(action)", body))
            }
            try await subscription("auto-renew-off")
            try await subscription("auto-renew-on")
            try await subscription("downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            try await subscription("extend", #"{"days":3}"#)
            try await subscription("offer-redeemed")
            try await subscription("metadata-update")
            try await subscription("price-change")
            let mass = try await api.simulator(
                "/simulator/mass-extensions",
                #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.premium.monthly","days":2,"environment":"Production"}"#)
            try await sent(mass)
            try await subscription("price-increase", #"{"price":12.99,"requiresConsent":true}"#)
            try await subscription("price-increase-consent", #"{"accept":true}"#)
            let credits = try await api.buy("credits.100", extra: ["environment": "Production"])
            let creditsId = try #require(credits["transactionId"] as? String)
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(credits["signedTransaction"] as? String)])
            try await sent(credits)
            let asked = try await sent(try await api.simulator("/simulator/transactions/\(creditsId)/consumption-request", "{}"))
            #expect(asked.first?["consumptionJobId"] != nil, "\(asked)")
            try await sent(try await api.simulator("/simulator/transactions/\(creditsId)/refund-declined", "{}"))
            let refunded = try await sent(try await api.simulator("/simulator/transactions/\(creditsId)/refund", "{}"))
            #expect(refunded.first?["refundJobId"] != nil)
            try await sent(try await api.simulator("/simulator/transactions/\(creditsId)/refund-reversed", "{}"))
            for subtype in ["CREATED", "ACTIVE_TOKEN_REMINDER", "UNREPORTED"] {
                try await sent(
                    try await api.simulator(
                        "/simulator/external-purchase-tokens", #"{"bundleId":"com.entitle.demo","subtype":"\#(subtype)"}"#))
            }
            let consent = try await sent(try await api.simulator("/simulator/transactions/\(creditsId)/rescind-consent", "{}"))
            let webhookJob = try #require(consent.first?["webhookJobId"] as? String, "\(consent)")
            // Apple's test notification, asked for with the app's key.
            let client = try #require(api.settings.gateways["demo"]?["com.entitle.demo"]?.sandbox)
            let test = try await client.requestTestNotification()
            try await sent(["notificationUUID": try #require(test.testNotificationToken)])
            // Time passes: a renewal, then the end (auto-renew off).
            try await api.advance(seconds: 40 * 86_400)
            try await sent(["notifications": try await Self.all(api)])
            try await subscription("auto-renew-off")
            try await api.advance(seconds: 32 * 86_400)
            try await sent(["notifications": try await Self.all(api)])

            let expected: [String: String] = [
                "SUBSCRIBED/INITIAL_BUY": "applied", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED": "applied",
                "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED": "applied", "DID_CHANGE_RENEWAL_PREF/DOWNGRADE": "applied",
                "RENEWAL_EXTENDED": "applied", "PRICE_INCREASE/PENDING": "applied", "PRICE_INCREASE/ACCEPTED": "applied",
                "ONE_TIME_CHARGE": "applied", "CONSUMPTION_REQUEST": "applied", "REFUND_DECLINED": "applied", "REFUND": "refund",
                "REFUND_REVERSED": "refund", "EXTERNAL_PURCHASE_TOKEN/CREATED": "recorded",
                "EXTERNAL_PURCHASE_TOKEN/ACTIVE_TOKEN_REMINDER": "recorded", "EXTERNAL_PURCHASE_TOKEN/UNREPORTED": "recorded",
                "RESCIND_CONSENT": "recorded", "TEST": "recorded", "DID_RENEW": "applied", "EXPIRED/VOLUNTARY": "applied",
                "OFFER_REDEEMED": "applied", "RENEWAL_EXTENSION/SUMMARY": "recorded", "METADATA_UPDATE": "applied",
                "PRICE_CHANGE": "applied",
            ]
            for (name, handling) in expected {
                #expect(seen[name] == handling, "\(name): \(seen[name] ?? "never sent")")
            }
            // The same notification again (Apple's retry): the same job, nothing applied twice.
            let entry = try await api.sentNotification(try #require((bought["notifications"] as? [String])?.first))
            var jobs: Set<String> = []
            for _ in 0..<2 {
                let reply = try await api.call(
                    .POST, "/v1/notifications/apple/demo", token: nil, body: String(decoding: entry.body, as: UTF8.self))
                jobs.insert(try #require(reply.json["jobId"] as? String))
            }
            #expect(jobs.count == 1)

            // The consent webhook, as its schema says.
            let finished = try await api.finished(webhookJob)
            #expect(finished["status"] as? String == "succeeded", "\(finished)")
            let deliveries = await hooks.entries.filter { $0.path == "/hooks" }
            let bodies = deliveries.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }
            let rescinded = try #require(bodies.first { $0["event"] as? String == "consent_rescinded" })
            #expect(OpenAPIDocument.shared.checkWebhook(rescinded).isEmpty, "\(OpenAPIDocument.shared.checkWebhook(rescinded))")
            #expect(rescinded["bundleId"] as? String == "com.entitle.demo" && rescinded["appTransactionId"] != nil, "\(rescinded)")
            #expect(rescinded["customer"] == nil && rescinded["publisher"] as? String == "demo")
            #expect(bodies.filter { $0["event"] as? String == "consent_rescinded" }.count == 1)
        }
    }

    /// Every V2 notification the simulator sent, oldest first.
    static func all(_ api: APIStack) async throws -> [String] {
        let all = try #require(try await api.simulatorJSON("/simulator/notifications") as? [[String: Any]])
        return all.filter { $0["notificationType"] as? String != "TEST" }.compactMap { $0["notificationUUID"] as? String }
    }
}
