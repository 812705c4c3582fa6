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

    /// A subscription changed to another offer at renewal (premium, then basic), claimed with
    /// the proof of its premium period: no access to premium (which the answer names), the
    /// customer's entitlements those of basic, as the access route says.
    @Test(.timeLimit(.minutes(3))) func aClaimAfterAChangeToAnotherOfferAnswersForThePostedOffer() async throws {
        try await APIStack.run("downgraded-unheld", worker: true) { api in
            let premium = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let original = try #require(premium["originalTransactionId"] as? String)
            let proof = try #require(premium["signedTransaction"] as? String)
            try await api.simulator("/simulator/subscriptions/\(original)/downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            try await api.advance(seconds: 40 * 86_400)
            let customer = "downgraded-unheld@example.com"
            let claimed = try await api.claim(["customer": customer, "signedTransaction": proof])
            #expect(try await !api.access(customer, "premium"))
            #expect(try await api.access(customer, "basic"))
            #expect(claimed["offerId"] as? String == "premium", "\(claimed)")
            #expect(claimed["accessGranted"] as? Bool == false, "\(claimed)")
            #expect(claimed["entitlements"] as? [String] == ["basic"], "\(claimed)")
        }
    }
}
