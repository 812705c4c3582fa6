import Entitlements
import Foundation
import Testing

/// Apple's `revocationType` and `revocationPercentage` (milliunits of a percent) applied by
/// product kind: a consumable loses the refunded share of its credits, never more than the
/// balance holds (the rest is a recorded shortfall); a reversal gives back exactly what
/// was taken.
@Suite struct ProratedRefundTests {
    let engine: EntitlementEngine
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    init() throws {
        let catalog = try EntitlementCatalog(json: try EntitlementCatalogTests.developmentCatalog)
        engine = EntitlementEngine(publisher: try #require(catalog.publisher("demo")))
    }

    func fact(_ id: String, _ product: String, _ kind: ProductKind, at date: Date, quantity: Int = 1) -> PurchaseFact {
        PurchaseFact(
            transactionId: id, originalTransactionId: id, productId: product, bundleId: "com.entitle.demo", kind: kind,
            environment: "Sandbox", purchaseDate: date, quantity: quantity, signedDate: date)
    }

    /// The same transaction as Apple serves it after a refund (`percentage` nil: reversed).
    func refunded(_ fact: PurchaseFact, at date: Date, type: String?, percentage: Int?) -> PurchaseFact {
        var view = fact
        view.revocationDate = date
        view.revocationType = type
        view.revocationPercentage = percentage
        view.signedDate = date
        return view
    }

    func reversed(_ fact: PurchaseFact, at date: Date) -> PurchaseFact {
        var view = fact
        (view.revocationDate, view.revocationType, view.revocationPercentage) = (nil, nil, nil)
        view.signedDate = date
        return view
    }

    @Test func theShareRoundsToTheNearestCreditHalvesUp() {
        #expect(CreditLedger.share(of: 300, milliunits: 33333) == 100)  // 99.999
        #expect(CreditLedger.share(of: 300, milliunits: 66667) == 200)  // 200.001
        #expect(CreditLedger.share(of: 3, milliunits: 33333) == 1)  // 0.99999
        #expect(CreditLedger.share(of: 100, milliunits: 50000) == 50)
        #expect(CreditLedger.share(of: 1, milliunits: 50000) == 1)  // a half rounds up
        #expect(CreditLedger.share(of: 1, milliunits: 49999) == 0)
        #expect(CreditLedger.share(of: 100, milliunits: 15) == 0)  // 0.015 %
        #expect(CreditLedger.share(of: 100, milliunits: 100_000) == 100)
        // Out of Apple's bounds: clamped, never more than the whole, never a trap.
        #expect(CreditLedger.share(of: 100, milliunits: 250_000) == 100)
        #expect(CreditLedger.share(of: 100, milliunits: -5) == 0)
        #expect(CreditLedger.share(of: Int.max, milliunits: 100_000) == Int.max)
        #expect(CreditLedger.share(of: Int.max, milliunits: 50000) == Int.max / 2 + 1)
    }

    @Test func aProratedRefundOfAConsumableClawsBackItsShare() {
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let purchase = fact("1", "com.entitle.demo.credits.100", .consumable, at: start, quantity: 3)
        _ = engine.apply(purchase, to: &state, now: start)
        let when = start.addingTimeInterval(day)
        let decision = engine.apply(refunded(purchase, at: when, type: "REFUND_PRORATED", percentage: 33333), to: &state, now: when)
        #expect(decision.creditBalance == 200 && decision.creditsClawedBack == 100 && decision.creditShortfall == 0)
        let clawback = state.credits.entries.last
        #expect(clawback?.kind == .clawback && clawback?.amount == -100 && clawback?.percentage == 33333 && clawback?.shortfall == nil)
        // The same view again changes nothing.
        #expect(!engine.apply(refunded(purchase, at: when, type: "REFUND_PRORATED", percentage: 33333), to: &state, now: when).changed)
        #expect(state.credits.balance == 200)
    }

    @Test func aRefundOfSpentCreditsTakesWhatIsLeftAndRecordsTheShortfall() {
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let purchase = fact("1", "com.entitle.demo.credits.100", .consumable, at: start)
        _ = engine.apply(purchase, to: &state, now: start)
        #expect(state.credits.spend(50, reference: "call-1", at: start.addingTimeInterval(60)) == .spent)
        #expect(state.credits.spend(50, reference: "call-1", at: start.addingTimeInterval(60)) == .repeated)
        #expect(state.credits.spend(51, reference: "call-2", at: start.addingTimeInterval(60)) == .insufficientCredits)
        let when = start.addingTimeInterval(day)
        let decision = engine.apply(refunded(purchase, at: when, type: "REFUND_FULL", percentage: 100_000), to: &state, now: when)
        #expect(decision.creditBalance == 0 && decision.creditsClawedBack == 50 && decision.creditShortfall == 50)
        #expect(state.credits.entries.map(\.amount) == [100, -50, -50])
        #expect(state.credits.entries.last?.shortfall == 50)

        // The reversal gives back the 50 taken, not the 50 that were spent.
        let later = when.addingTimeInterval(day)
        let reversal = engine.apply(reversed(purchase, at: later), to: &state, now: later)
        #expect(reversal.creditsClawedBack == -50 && reversal.creditBalance == 50)
        #expect(state.credits.entries.map(\.amount) == [100, -50, -50, 50])
        // Refunded again (a new dispute), then reversed again: each takes and gives what it did.
        let again = later.addingTimeInterval(day)
        #expect(
            engine.apply(refunded(purchase, at: again, type: "REFUND_PRORATED", percentage: 40000), to: &state, now: again)
                .creditsClawedBack == 40)
        let last = again.addingTimeInterval(day)
        #expect(engine.apply(reversed(purchase, at: last), to: &state, now: last).creditsClawedBack == -40)
        #expect(state.credits.balance == 50)
    }

    @Test func aFullRefundWithoutApplesNewFieldsTakesEverything() {
        // Receipts, V1 and data from before API 1.19 carry no revocationType: a full refund.
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let purchase = fact("1", "com.entitle.demo.credits.100", .consumable, at: start, quantity: 2)
        _ = engine.apply(purchase, to: &state, now: start)
        let when = start.addingTimeInterval(day)
        #expect(engine.apply(refunded(purchase, at: when, type: nil, percentage: nil), to: &state, now: when).creditsClawedBack == 200)
        // A prorated type without a percentage is read as the whole purchase.
        var other = CustomerEntitlements(publisher: "demo", customer: "other@example.com")
        _ = engine.apply(purchase, to: &other, now: start)
        #expect(
            engine.apply(refunded(purchase, at: when, type: "REFUND_PRORATED", percentage: nil), to: &other, now: when).creditsClawedBack
                == 200)
    }

    @Test(arguments: [
        ("com.entitle.demo.issue.2026.11", ProductKind.nonConsumable, "issue:2026-11"),
        ("com.entitle.demo.pass.30days", ProductKind.nonRenewing, "premium"),
    ])
    func aProratedRefundOfANonConsumableOrPassEndsAccessAtTheRevocationDate(product: String, kind: ProductKind, entitlement: String) {
        var state = CustomerEntitlements(publisher: "demo", customer: "reader@example.com")
        let purchase = fact("10", product, kind, at: start)
        _ = engine.apply(purchase, to: &state, now: start)
        let when = start.addingTimeInterval(2 * day)
        let decision = engine.apply(refunded(purchase, at: when, type: "REFUND_PRORATED", percentage: 60000), to: &state, now: when)
        #expect(!decision.accessGranted && decision.reason == .revoked)
        #expect(state.entitlements(at: when.addingTimeInterval(-1)).contains(entitlement))
        #expect(!state.entitlements(at: when).contains(entitlement))
        #expect(state.transactions["10"]?.revocationPercentage == 60000 && state.transactions["10"]?.revocationType == "REFUND_PRORATED")
        // Reversed: access is back.
        let later = when.addingTimeInterval(day)
        #expect(engine.apply(reversed(purchase, at: later), to: &state, now: later).accessGranted)
        #expect(state.entitlements(at: later).contains(entitlement))
    }
}
