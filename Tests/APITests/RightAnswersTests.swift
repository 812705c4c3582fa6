import Foundation
import RedisTestSupport
import Testing

/// The wrong answers publishers met, each through the API, the worker and the simulator:
/// a purchase transferred back, a repeated request, a V1 consumable refund, a status read
/// after expiry, and verifyReceipt's 21006.
@Suite struct RightAnswersTests {
    static let kinds: [(product: String, offer: String)] = [
        ("issue.2026.11", "issue-2026-11"), ("pass.30days", "pass-30"), ("premium.monthly", "premium"),
    ]

    @Test(.timeLimit(.minutes(4))) func aPurchaseTransferredBackAndForthGivesAccessToItsHolderOnly() async throws {
        try await APIStack.run("ping-pong", worker: true) { api in
            for (product, offer) in Self.kinds {
                let ann = "ann-\(offer)@example.com"
                let bob = "bob-\(offer)@example.com"
                let bought = try await api.buy(product, account: nil, extra: ["environment": "Production"])
                let jws = try #require(bought["signedTransaction"] as? String)
                let id = try #require(bought["transactionId"] as? String)
                let original = try #require(bought["originalTransactionId"] as? String)
                let receipt = try #require(bought["appReceipt"] as? String)
                func holder(_ expected: String, _ step: String) async throws {
                    #expect(try await api.access(expected, offer), "\(product) \(step): \(expected) has access")
                    let other = expected == ann ? bob : ann
                    #expect(try await !api.access(other, offer), "\(product) \(step): \(other) has none")
                }

                let first = try await api.claim(["customer": ann, "signedTransaction": jws])
                #expect(first["accessGranted"] as? Bool == true)
                try await holder(ann, "bought")

                // A -> B: bob sends the purchase (by transaction id); it is transferred to him.
                let toBob = try await api.claim(["customer": bob, "transactionId": id])
                #expect((toBob["transfer"] as? [String: Any])?["from"] as? String == ann)
                try await holder(bob, "A->B")

                // B -> A: the publisher moves it back.
                let back = try await api.transfer(original, to: ann, from: bob)
                #expect(back["newOwner"] as? String == ann)
                let annNow = try await api.customer(ann)["entitlements"] as? [String]
                #expect(back["entitlements"] as? [String] == annNow && annNow?.isEmpty == false, "the new holder's: \(back)")
                try await holder(ann, "B->A")

                // A -> B again (by app receipt), and B -> A by ann's own request.
                let again = try await api.claim(["customer": bob, "appReceipt": receipt, "transactionId": id])
                #expect(again["accessGranted"] as? Bool == true && !(again["entitlements"] as? [String] ?? []).isEmpty, "\(again)")
                try await holder(bob, "A->B->A->B")
                let home = try await api.claim(["customer": ann, "transactionId": id, "offerId": offer])
                #expect(home["accessGranted"] as? Bool == true, "\(home)")
                #expect(!(home["entitlements"] as? [String] ?? []).isEmpty, "the job's entitlements are ann's now: \(home)")
                try await holder(ann, "A->B->A->B->A")
            }
        }
    }

    /// The same transfer asked again once its job moved the purchase (a new job: the first is
    /// done) is refused and moves nothing twice: one transfer event, access where it was.
    @Test(.timeLimit(.minutes(3))) func aTransferAskedAgainAfterItsJobMovedThePurchaseMovesNothingTwice() async throws {
        try await APIStack.run("transfer-again", worker: true) { api in
            let (ann, bob) = ("ann-again@example.com", "bob-again@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let first = try await api.transfer(original, to: bob, from: ann)
            #expect(first["newOwner"] as? String == bob)

            let reply = try await api.call(
                .POST, "/v1/transfers", json: ["originalTransactionId": original, "to": bob, "from": ann], route: "POST /v1/transfers")
            try #require(reply.status == 202, "\(reply.text)")
            let again = try await api.finished(try #require(reply.json["jobId"] as? String))
            #expect(again["status"] as? String == "failed", "\(again)")
            #expect("\(again)".contains("alreadyHeld"), "\(again)")
            let transfers = try await api.events(bob).filter { $0["type"] as? String == "transfer" }
            #expect(transfers.count == 1, "\(transfers)")
            #expect(try await api.access(bob, "premium"))
            #expect(try await !api.access(ann, "premium"))
        }
    }

    @Test(.timeLimit(.minutes(3))) func aRepeatedRequestIsAnsweredFromTheStateNow() async throws {
        try await APIStack.run("repeat", worker: true) { api in
            // carol's subscription moves to dave; carol sends her first request again.
            let bought = try await api.buy("premium.monthly", account: nil, extra: ["environment": "Production"])
            let request: [String: Any] = [
                "customer": "carol@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ]
            let firstJob = try await api.submit(request)
            #expect(try await api.result(firstJob)["accessGranted"] as? Bool == true)
            _ = try await api.claim(["customer": "dave@example.com", "transactionId": try #require(bought["transactionId"] as? String)])
            #expect(try await !api.access("carol@example.com", "premium"))
            let repeatJob = try await api.submit(request)
            #expect(repeatJob != firstJob, "the first job has finished: a repeat is a new claim")
            let repeated = try await api.result(repeatJob)
            #expect((repeated["transfer"] as? [String: Any])?["from"] as? String == "dave@example.com", "\(repeated)")
            let carol = try await api.customer("carol@example.com")
            #expect(repeated["accessGranted"] as? Bool == true, "\(repeated) \(carol)")
            #expect(try await api.access("carol@example.com", "premium"))
            #expect(try await !api.access("dave@example.com", "premium"))

            // /v1/validate repeated after a refund: the balance now, not the first answer.
            let credits = try await api.buy("credits.100", account: nil)
            let receipt = APIStack.escape(try #require(credits["appReceipt"] as? String))
            let query =
                "/v1/validate?token=\(APIStack.demoToken)&username=erin%40example.com&receipt=\(receipt)&product=com.entitle.demo.credits.100"
            let ok = try await api.call(.GET, query, token: nil, route: "GET /v1/validate")
            #expect(ok.status == 200 && ok.text.contains("<credits>100</credits>"), "\(ok.text)")
            let refund = try await api.simulator(
                "/simulator/transactions/\(try #require(credits["transactionId"] as? String))/refund", "{}")
            let uuid = try #require((refund["notifications"] as? [String])?.first)
            let notification = try await api.forward(try await api.sentNotification(uuid))
            _ = try await api.result(try #require(notification["refundJobId"] as? String))
            #expect(((try await api.customer("erin@example.com"))["credits"] as? [String: Any])?["balance"] as? Int == 0)
            let after = try await api.call(.GET, query, token: nil, route: "GET /v1/validate")
            #expect(after.status == 403, "\(after.text)")
            #expect(after.text.contains("<credits>0</credits>"), "\(after.text)")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aV1RefundOfAConsumableClawsBackItsCredits() async throws {
        try await APIStack.run("v1-refund", worker: true) { api in
            // Only V1 notifications, straight to the API (Cleeng's table is in V1 terms).
            try await api.simulator("/simulator/notifications/url", #"{"v1Url":"\#(api.url)/v1/notifications/apple/demo"}"#)
            let credits = try await api.buy("credits.100", account: nil)
            let validated = try await api.call(
                .POST, "/v1/validate", headers: ["Accept": "application/json"],
                json: [
                    "username": "frank@example.com", "receipt": try #require(credits["appReceipt"] as? String),
                    "product": "com.entitle.demo.credits.100",
                ],
                route: "POST /v1/validate")
            #expect(validated.status == 200 && validated.json["credits"] as? Int == 100, "\(validated.text)")
            let id = try #require(credits["transactionId"] as? String)
            try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            try await eventually("the V1 REFUND to claw the credits back", timeout: .seconds(30)) {
                let credits = try await api.customer("frank@example.com")["credits"] as? [String: Any]
                return credits?["balance"] as? Int == 0
            }
            let ledger = ((try await api.customer("frank@example.com"))["credits"] as? [String: Any])?["ledger"] as? [[String: Any]] ?? []
            #expect(ledger.map { $0["kind"] as? String } == ["purchase", "clawback"])
            #expect(ledger.allSatisfy { $0["transactionId"] as? String == id })
        }
    }

    @Test(.timeLimit(.minutes(3))) func statusIsComputedWhenAskedAndHistoryIsAsOfTheDate() async throws {
        try await APIStack.run("status-at", worker: true) { api in
            // A free week (the product's introductory offer), auto-renew off; nothing tells
            // Entitle of the expiry (the notifications stay in the inbox).
            let bought = try await api.buy("premium.monthly", account: nil, extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            let claimed = try await api.claim([
                "customer": "gina@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            let expiresText = try #require((claimed["subscription"] as? [String: Any])?["expiresDate"] as? String)
            let expires = try Date(expiresText, strategy: .iso8601).timeIntervalSince1970 * 1000
            let purchased = try await api.simulatorNow()
            try await api.simulator("/simulator/subscriptions/\(original)/auto-renew-off", "{}")
            try await api.advance(seconds: 8 * 86_400)

            let now = try await api.customer("gina@example.com")
            #expect(now["entitlements"] as? [String] == [])
            let subscription = (now["subscriptions"] as? [[String: Any]])?.first
            #expect(subscription?["status"] as? String == "expired", "read after the expiry: \(now)")
            #expect((subscription?["expiresDate"] as? Double).map { abs($0 - expires) < 1000 } == true)
            #expect(try await !api.access("gina@example.com", "premium"))

            // History: nothing before the purchase, active during the week, expired after.
            let before = try await api.customer("gina@example.com", at: purchased.addingTimeInterval(-3600))
            #expect((before["subscriptions"] as? [[String: Any]])?.isEmpty == true, "before the purchase: \(before)")
            let during = try await api.customer("gina@example.com", at: purchased.addingTimeInterval(86_400))
            #expect((during["subscriptions"] as? [[String: Any]])?.first?["status"] as? String == "active", "\(during)")
            #expect(during["entitlements"] as? [String] == ["hd", "premium"])
            let after = try await api.customer("gina@example.com", at: Date(timeIntervalSince1970: expires / 1000 + 1))
            #expect((after["subscriptions"] as? [[String: Any]])?.first?["status"] as? String == "expired", "\(after)")
        }
    }

    @Test(.timeLimit(.minutes(3))) func verifyReceipts21006IsAnExpiryRecordedAndSaid() async throws {
        try await APIStack.run("21006", worker: true) { api in
            func pay(_ customer: String, _ bought: [String: Any], coupon: String? = nil) async throws -> [String: Any] {
                var body: [String: Any] = [
                    "customerEmail": customer, "offerId": "premium", "appType": "ios",
                    "receipt": [
                        "transactionId": bought["transactionId"] as? String ?? "", "receiptData": bought["appReceipt"] as? String ?? "",
                    ],
                ]
                if let coupon { body["couponCode"] = coupon }
                let reply = try await api.call(
                    .POST, "/apple/payment", token: nil, headers: CompatibilityRouteTests.cleengHeaders, json: body,
                    route: "POST /apple/payment")
                try #require(reply.status == 200, "\(reply.text)")
                return try await api.result(try #require(reply.json["jobId"] as? String))
            }
            let fault = #"{"target":"verifyReceipt","receiptStatus":21006}"#

            // A subscription Entitle knows: Apple's bare 21006 ends it now.
            let hanks = try await api.buy("premium.monthly", account: nil, extra: ["environment": "Production"])
            #expect(try await pay("hank@example.com", hanks)["accessGranted"] as? Bool == true)
            try await api.simulator("/simulator/faults", fault)
            let expired = try await pay("hank@example.com", hanks, coupon: "WELCOME50")
            #expect(expired["accessGranted"] as? Bool == false)
            #expect(expired["reason"] as? String == "expired", "\(expired)")
            #expect((expired["message"] as? String ?? "").contains("21006"), "\(expired)")
            #expect(try await !api.access("hank@example.com", "premium"))
            let hank = try await api.customer("hank@example.com")
            #expect((hank["subscriptions"] as? [[String: Any]])?.first?["status"] as? String == "expired", "\(hank)")

            // One it does not know: said, not mistaken for another app's receipt.
            let ivans = try await api.buy("premium.monthly", account: nil, extra: ["environment": "Production"])
            try await api.simulator("/simulator/faults", fault)
            let unknown = try await pay("ivan@example.com", ivans)
            #expect(unknown["reason"] as? String == "expired", "\(unknown)")
            #expect((unknown["message"] as? String ?? "").contains("expired"))
        }
    }
}
