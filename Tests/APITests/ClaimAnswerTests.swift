import Foundation
import Testing

/// What a receipt job answers when the app posts an older transaction of a subscription
/// Apple has said more about since: the answer is the posted purchase's standing once every
/// view is applied, for the offer the posted transaction sells.
@Suite struct ClaimAnswerTests {
    /// A subscription renewed while nobody held it, claimed with the proof of its first
    /// period: the answer is the access its newest period gives.
    @Test(.timeLimit(.minutes(3))) func aClaimWithTheFirstPeriodsProofAnswersWithTheNewest() async throws {
        try await APIStack.run("renewed-unheld", worker: true) { api in
            let basic = try await api.buy("basic.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let proof = try #require(basic["signedTransaction"] as? String)
            try await api.advance(seconds: 40 * 86_400)
            let customer = "renewed-unheld@example.com"
            let claimed = try await api.claim(["customer": customer, "signedTransaction": proof])
            #expect(try await api.access(customer, "basic"))
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
            #expect((claimed["subscription"] as? [String: Any])?["status"] as? String == "active", "\(claimed)")
            #expect((claimed["entitlements"] as? [String])?.isEmpty == false, "\(claimed)")
        }
    }

    /// A subscription changed to another offer, at renewal (premium, then basic) or at once
    /// (basic, then premium), claimed with the proof of its first period: the answer speaks of
    /// the offer it names (the first one), as the access route does, on a first claim, a dry
    /// run and a repeat (where the customer already holds the later period).
    @Test(.timeLimit(.minutes(3)), arguments: [("premium", "basic", "downgrade"), ("basic", "premium", "upgrade")])
    func aClaimAfterAChangeToAnotherOfferAnswersForThePostedOffer(first: String, then: String, change: String) async throws {
        try await APIStack.run("changed-\(change)", worker: true) { api in
            let bought = try await api.buy("\(first).monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let original = try #require(bought["originalTransactionId"] as? String)
            let proof = try #require(bought["signedTransaction"] as? String)
            try await api.simulator(
                "/simulator/subscriptions/\(original)/\(change)", #"{"productId":"com.entitle.demo.\#(then).monthly"}"#)
            if change == "downgrade" { try await api.advance(seconds: 40 * 86_400) }
            let customer = "\(change)-unheld@example.com"
            let body: [String: Any] = ["customer": customer, "signedTransaction": proof]
            let preview = try await api.call(.POST, "/v1/purchases?dryRun=true", json: body, route: "POST /v1/purchases")
            try #require(preview.status == 200, "\(preview.status) \(preview.text)")
            let previewed = try #require(preview.json["result"] as? [String: Any], "\(preview.json)")
            let claimed = try await api.claim(body)
            let repeated = try await api.claim(body)
            #expect(try await !api.access(customer, first))
            #expect(try await api.access(customer, then))
            for answer in [previewed, claimed, repeated] {
                #expect(answer["offerId"] as? String == first, "\(answer)")
                #expect(answer["accessGranted"] as? Bool == false, "\(answer)")
                #expect(answer["reason"] as? String == "expired", "\(answer)")
                let subscription = answer["subscription"] as? [String: Any]
                #expect(subscription?["status"] as? String == "active", "\(answer)")
                #expect(subscription?["productId"] as? String == "com.entitle.demo.\(then).monthly", "\(answer)")
                #expect((answer["entitlements"] as? [String])?.contains(then) == true, "\(answer)")
            }
        }
    }
}
