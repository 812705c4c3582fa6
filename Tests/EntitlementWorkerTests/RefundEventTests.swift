import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import Testing

/// The publisher's `refund` webhook says how much Apple refunded, and a clawback's `credit`
/// event what it took and what it could not.
@Suite struct RefundEventTests {
    @Test func theRefundWebhookCarriesTypeAndPercentageAndTheClawbackItsShortfall() throws {
        var publisher = try #require(try AppleFactsTests.engine().publisher)
        publisher.webhook = try JSONDecoder().decode(
            Publisher.Webhook.self, from: Data(#"{"url":"https://hooks.example.com/e","secretVariable":"W"}"#.utf8))
        let engine = EntitlementEngine(publisher: publisher)
        let start = Date(timeIntervalSince1970: 1_790_000_000)
        let bought = PurchaseFact(
            transactionId: "7", originalTransactionId: "7", productId: "com.entitle.demo.credits.100", bundleId: "com.entitle.demo",
            kind: .consumable, environment: "Sandbox", purchaseDate: start, quantity: 3, signedDate: start)
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        _ = engine.apply(bought, to: &state, now: start)
        _ = state.credits.spend(250, reference: "calls", at: start)
        let before = state
        var refunded = bought
        let when = start.addingTimeInterval(3600)
        (refunded.revocationDate, refunded.revocationType, refunded.revocationPercentage, refunded.signedDate) =
            (when, "REFUND_PRORATED", 33333, when)
        _ = engine.apply(refunded, to: &state, now: when)

        let change = try ChangeEvents(
            publisher: publisher, renewalCheckMargin: .seconds(5), billingRetryCheckInterval: .seconds(60), now: when
        ).changes(before: before, after: state, version: 3)
        let refund = try #require(change.events.first { $0.type == .refund })
        #expect(refund.revocationType == "REFUND_PRORATED" && refund.revocationPercentage == 33333)
        #expect(refund.customerVersion == 3)
        let clawback = try #require(change.events.first { $0.type == .creditsClawedBack })
        // A third of 300 is 100; only 50 were left.
        #expect(clawback.amount == 50 && clawback.shortfall == 50 && clawback.revocationPercentage == 33333 && clawback.balance == 0)
        // The webhooks: the refund's type and percentage, the clawback as the `credit` receivers
        // of the earlier names know it (a negative amount).
        let bodies = try change.followUps.filter { $0.type == .webhook }.map {
            try JobPayloads.decode(JobPayloads.Webhook.self, $0.payload).event
        }
        let posted = try #require(bodies.first { $0.contains(#""event":"refund""#) })
        #expect(posted.contains(#""revocationPercentage":33333"#) && posted.contains(#""revocationType":"REFUND_PRORATED""#))
        let credit = try #require(bodies.first { $0.contains(#""event":"credits_clawed_back""#) })
        #expect(credit.contains(#""type":"credit""#) && credit.contains(#""amount":-50"#) && credit.contains(#""customerVersion":3"#))
    }
}
