import Foundation
import RedisTestSupport
import Testing

/// Apple's `CONSUMPTION_REQUEST` answered with Send Consumption Information (V2) through the
/// simulator, the API and a worker: the notification becomes a `consumption` job, which
/// sends what the customer's records say (delivery, the share used) as the publisher's
/// policy allows, and the simulator checks every body against Apple's rules before it
/// records it. The demo publisher answers, on its terms' consent, preferring a prorated refund.
@Suite struct ConsumptionFlowTests {
    /// Asks for consumption information about `transactionId` at the simulator, forwards
    /// the notification, and returns the `consumption` job's result; `before` runs between
    /// Apple asking and the notification arriving.
    static func ask(
        _ api: APIStack, _ transactionId: String, before: () async throws -> Void = {}
    ) async throws -> [String: Any] {
        let asked = try await api.simulator(
            "/simulator/transactions/\(transactionId)/consumption-request", #"{"consumptionReason":"UNINTENDED_PURCHASE"}"#)
        let uuid = try #require((asked["notifications"] as? [String])?.first)
        let entry = try await api.sentNotification(uuid)
        try await before()
        let notification = try await api.forward(entry)
        return try await api.result(try #require(notification["consumptionJobId"] as? String, "\(notification)"))
    }

    /// What the simulator recorded as received for the transaction (nil: nothing).
    static func received(_ api: APIStack, _ transactionId: String) async throws -> [String: Any]? {
        try await api.simulator("/simulator/transactions/\(transactionId)")["consumption"] as? [String: Any]
    }

    /// Buys and claims for `customer`; the transaction id.
    static func bought(_ api: APIStack, _ product: String, for customer: String) async throws -> String {
        let bought = try await api.buy(product)
        _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        return try #require(bought["transactionId"] as? String)
    }

    @Test(.timeLimit(.minutes(4))) func consumablesAreAnsweredWithTheShareOfTheirCreditsSpentFirstInFirstOut() async throws {
        try await APIStack.run("consumption-credits", worker: true) { api in
            // Unused: delivered, 0 % (a prorated preference needs a share between 0 and 100 %: none is sent).
            let unused = try await Self.bought(api, "credits.100", for: "una@example.com")
            let first = try await Self.ask(api, unused)
            #expect(first["sent"] as? Bool == true, "\(first)")
            #expect(first["deliveryStatus"] as? String == "DELIVERED" && first["consumptionPercentage"] as? Int == 0, "\(first)")
            #expect(first["refundPreference"] == nil && first["customer"] as? String == "una@example.com")
            let recorded = try #require(try await Self.received(api, unused))
            #expect(recorded["deliveryStatus"] as? String == "DELIVERED" && recorded["consumptionPercentage"] as? Int == 0)
            #expect(recorded["customerConsented"] as? Bool == true && recorded["sampleContentProvided"] as? Bool == false)
            #expect(recorded["refundPreference"] == nil)

            // Half spent: 50 %, and the publisher's prorated preference.
            let half = try await Self.bought(api, "credits.100", for: "hal@example.com")
            _ = try await ProratedRefundFlowTests.spend(api, "hal@example.com", 50, reference: "call-1")
            let halfAnswer = try await Self.ask(api, half)
            #expect(halfAnswer["consumptionPercentage"] as? Int == 50_000, "\(halfAnswer)")
            #expect(halfAnswer["refundPreference"] as? String == "GRANT_PRORATED")
            #expect(try await Self.received(api, half)?["refundPreference"] as? String == "GRANT_PRORATED")

            // Two purchases, 150 credits spent: the older is all used, the newer half.
            let older = try await Self.bought(api, "credits.100", for: "fifo@example.com")
            let newer = try await Self.bought(api, "credits.100", for: "fifo@example.com")
            _ = try await ProratedRefundFlowTests.spend(api, "fifo@example.com", 150, reference: "calls")
            let olderAnswer = try await Self.ask(api, older)
            #expect(olderAnswer["consumptionPercentage"] as? Int == 100_000 && olderAnswer["refundPreference"] == nil, "\(olderAnswer)")
            #expect(try await Self.ask(api, newer)["consumptionPercentage"] as? Int == 50_000)
            #expect(try await Self.received(api, older)?["consumptionPercentage"] as? Int == 100_000)
        }
    }

    @Test(.timeLimit(.minutes(4))) func aBookAPassASubscriptionAndAPurchaseNobodyHolds() async throws {
        try await APIStack.run("consumption-kinds", worker: true) { api in
            // A non-consumable held: delivered, no percentage.
            let book = try await Self.bought(api, "issue.2026.11", for: "bea@example.com")
            let bookAnswer = try await Self.ask(api, book)
            #expect(bookAnswer["deliveryStatus"] as? String == "DELIVERED" && bookAnswer["consumptionPercentage"] == nil, "\(bookAnswer)")
            #expect(try await Self.received(api, book)?["consumptionPercentage"] == nil)

            // A 30-day pass, 6 days in: 20 % used.
            let pass = try await Self.bought(api, "pass.30days", for: "pia@example.com")
            try await api.advance(seconds: 6 * 86_400)
            let passAnswer = try await Self.ask(api, pass)
            let share = try #require(passAnswer["consumptionPercentage"] as? Int, "\(passAnswer)")
            #expect(abs(share - 20_000) <= 100, "6 of 30 days: \(share)")

            // A subscription used for a week: delivered; Apple computes its share from time.
            let subscription = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false])
            let subscriptionId = try #require(subscription["transactionId"] as? String)
            _ = try await api.claim([
                "customer": "sol@example.com", "signedTransaction": try #require(subscription["signedTransaction"] as? String),
            ])
            try await api.advance(seconds: 7 * 86_400)
            let subscriptionAnswer = try await Self.ask(api, subscriptionId)
            #expect(subscriptionAnswer["sent"] as? Bool == true, "\(subscriptionAnswer)")
            #expect(subscriptionAnswer["deliveryStatus"] as? String == "DELIVERED" && subscriptionAnswer["consumptionPercentage"] == nil)
            #expect(subscriptionAnswer["refundPreference"] as? String == "GRANT_PRORATED")
            let recorded = try #require(try await Self.received(api, subscriptionId))
            #expect(recorded["consumptionPercentage"] == nil && recorded["refundPreference"] as? String == "GRANT_PRORATED")

            // Bought and never brought to Entitle (before it, or through another system): Entitle
            // cannot say, and says nothing.
            let stray = try #require(try await api.buy("credits.100")["transactionId"] as? String)
            let strayAnswer = try await Self.ask(api, stray)
            #expect(strayAnswer["sent"] as? Bool == false && strayAnswer["skipped"] as? String == "unknownPurchase", "\(strayAnswer)")
            #expect(try await Self.received(api, stray) == nil)
            // Family-shared: Apple takes no answer about it (4000185), so none is sent.
            let family = try await api.buy("premium.monthly", extra: ["familyShared": true, "useIntroductoryOffer": false])
            _ = try await api.claim([
                "customer": "fay@example.com", "signedTransaction": try #require(family["signedTransaction"] as? String),
            ])
            let familyAnswer = try await Self.ask(api, try #require(family["transactionId"] as? String))
            #expect(familyAnswer["skipped"] as? String == "familyShared", "\(familyAnswer)")
        }
    }

    @Test(.timeLimit(.minutes(4))) func nothingIsSentPastTheDeadlineOrWithoutConsentOrWhenThePublisherOptedOut() async throws {
        // Consent per customer, and one offer not answered.
        try await APIStack.run(
            "consumption-consent", worker: true,
            catalog: { publishers in
                publishers[0]["consumption"] = ["consent": "perCustomer", "offers": ["credits-100", "premium"]]
            }
        ) { api in
            let customer = "cora@example.com"
            let id = try await Self.bought(api, "credits.100", for: customer)
            let unconsented = try await Self.ask(api, id)
            #expect(unconsented["sent"] as? Bool == false && unconsented["skipped"] as? String == "noConsent", "\(unconsented)")
            #expect(try await Self.received(api, id) == nil)

            let path = "/v1/customers/\(APIStack.escape(customer))/consumption-consent"
            let route = "PUT /v1/customers/{id}/consumption-consent"
            #expect(try await api.call(.GET, path, route: "GET /v1/customers/{id}/consumption-consent").json["consented"] == nil)
            #expect(try await api.call(.PUT, path, json: ["consented": "yes"], route: route).status == 400)
            #expect(try await api.call(.PUT, path, token: APIStack.appKey, json: ["consented": true]).status == 403)
            // Another publisher's key writes its own customer of that name, not demo's.
            #expect(try await api.call(.PUT, path, token: APIStack.otherToken, json: ["consented": true]).status == 200)
            #expect(try await api.call(.GET, path).json["consented"] == nil)
            let set = try await api.call(.PUT, path, json: ["consented": true], route: route)
            #expect(set.status == 200 && set.json["consented"] as? Bool == true, "\(set.text)")
            let consented = try await Self.ask(api, id)
            #expect(consented["sent"] as? Bool == true, "\(consented)")
            #expect(try await Self.received(api, id)?["customerConsented"] as? Bool == true)

            // An offer the policy leaves out.
            let book = try await Self.bought(api, "issue.2026.11", for: customer)
            #expect(try await Self.ask(api, book)["skipped"] as? String == "offerNotAnswered")

            // Apple waits 12 hours: a request that reaches Entitle later is not answered.
            let late = try await Self.bought(api, "credits.100", for: customer)
            let lateAnswer = try await Self.ask(api, late) { try await api.advance(seconds: 12 * 3600 + 60) }
            #expect(lateAnswer["sent"] as? Bool == false && lateAnswer["skipped"] as? String == "deadlinePassed", "\(lateAnswer)")
            #expect(try await Self.received(api, late) == nil)
        }
        // A publisher that does not answer sends nothing, whatever it knows.
        try await APIStack.run(
            "consumption-off", worker: true, catalog: { publishers in publishers[0]["consumption"] = ["answer": false] }
        ) { api in
            let id = try await Self.bought(api, "credits.100", for: "otto@example.com")
            let answer = try await Self.ask(api, id)
            #expect(answer["sent"] as? Bool == false && answer["skipped"] as? String == "notAnswered", "\(answer)")
            #expect(try await Self.received(api, id) == nil)
        }
    }
}
