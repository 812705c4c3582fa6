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

        let events = ChangeEvents(
            publisher: publisher, clockOffset: 0, renewalCheckMargin: .seconds(5), billingRetryCheckInterval: .seconds(60), now: when
        ).events(before: before, after: state)
        let refund = try #require(events.first { $0.type == "refund" })
        #expect(refund.revocationType == "REFUND_PRORATED" && refund.revocationPercentage == 33333)
        let credit = try #require(events.first { $0.type == "credit" })
        // A third of 300 is 100; only 50 were left.
        #expect(credit.amount == -50 && credit.shortfall == 50 && credit.revocationPercentage == 33333 && credit.balance == 0)
        let posted = try JobPayloads.encode(refund)
        #expect(posted.contains(#""revocationPercentage":33333"#) && posted.contains(#""revocationType":"REFUND_PRORATED""#))
    }
}
