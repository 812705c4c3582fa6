import Entitlements
import Foundation
import Testing

@Suite struct EntitlementEngineTests {
    let engine: EntitlementEngine
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    init() throws {
        let catalog = try EntitlementCatalog(json: try EntitlementCatalogTests.developmentCatalog)
        engine = EntitlementEngine(publisher: try #require(catalog.publisher("demo")))
    }

    func fact(
        _ id: String, _ product: String, _ kind: ProductKind, at date: Date, expires: Date? = nil, original: String? = nil,
        quantity: Int = 1
    ) -> PurchaseFact {
        PurchaseFact(
            transactionId: id, originalTransactionId: original ?? id, productId: product, bundleId: "com.entitle.demo", kind: kind,
            environment: "Sandbox", purchaseDate: date, expiresDate: expires, quantity: quantity, signedDate: date)
    }

    @Test func consumablesAreCreditedOnceAndClawedBackOnRefund() {
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let purchase = fact("1", "com.entitle.demo.credits.100", .consumable, at: start, quantity: 3)
        let first = engine.apply(purchase, to: &state, now: start)
        #expect(first.accessGranted && first.creditsAdded == 300 && first.creditBalance == 300 && first.changed)
        // A duplicate submission, a replayed job: nothing changes.
        let again = engine.apply(purchase, to: &state, now: start.addingTimeInterval(60))
        #expect(again.creditsAdded == 0 && again.creditBalance == 300 && !again.changed)
        // A refund takes back that purchase's credits, once.
        _ = engine.apply(fact("2", "com.entitle.demo.credits.100", .consumable, at: start), to: &state, now: start)
        let refund = engine.refund(transactionId: "1", at: start.addingTimeInterval(day), in: &state)
        #expect(refund.creditBalance == 100 && refund.changed)
        #expect(!engine.refund(transactionId: "1", at: start.addingTimeInterval(2 * day), in: &state).changed)
        #expect(state.credits.entries.map(\.amount) == [300, 100, -300])
    }

    /// A quantity no App Store sells (it sells at most 10) cannot trap the arithmetic.
    @Test func anAbsurdQuantityIsBoundedNotATrap() {
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let decision = engine.apply(
            fact("q", "com.entitle.demo.credits.100", .consumable, at: start, quantity: Int.max), to: &state, now: start)
        #expect(decision.creditsAdded == 100 * 1_000 && decision.creditBalance == 100_000)
    }

    @Test func newsstandIssuesAreEntitledExactlyAsPaidFor() {
        var state = CustomerEntitlements(publisher: "demo", customer: "reader@example.com")
        _ = engine.apply(fact("10", "com.entitle.demo.issue.2026.11", .nonConsumable, at: start), to: &state, now: start)
        let december = start.addingTimeInterval(30 * day)
        _ = engine.apply(fact("11", "com.entitle.demo.issue.2026.12", .nonConsumable, at: december), to: &state, now: december)
        #expect(state.entitlements(at: start.addingTimeInterval(-1)) == [])
        #expect(state.entitlements(at: start.addingTimeInterval(day)) == ["issue:2026-11"])
        #expect(state.entitlements(at: december.addingTimeInterval(365 * day)) == ["issue:2026-11", "issue:2026-12"])
        // A refunded issue stops at the refund, and history still shows it was paid before.
        let refundDate = december.addingTimeInterval(2 * day)
        _ = engine.refund(transactionId: "10", at: refundDate, in: &state)
        #expect(state.entitlements(at: refundDate.addingTimeInterval(1)) == ["issue:2026-12"])
        #expect(state.entitlements(at: refundDate.addingTimeInterval(-1)) == ["issue:2026-11", "issue:2026-12"])
    }

    @Test func nonRenewingPassesLastTheirDays() {
        var state = CustomerEntitlements(publisher: "demo", customer: "c")
        let decision = engine.apply(fact("20", "com.entitle.demo.pass.30days", .nonRenewing, at: start), to: &state, now: start)
        #expect(decision.accessGranted && decision.entitlements == ["premium"])
        #expect(state.entitlements(at: start.addingTimeInterval(30 * day - 1)) == ["premium"])
        #expect(state.entitlements(at: start.addingTimeInterval(30 * day)) == [])
        let late = engine.apply(
            fact("20", "com.entitle.demo.pass.30days", .nonRenewing, at: start), to: &state, now: start.addingTimeInterval(31 * day))
        #expect(!late.accessGranted && late.reason == .expired)
    }

    @Test func subscriptionsRenewExpireAndKeepGraceAccess() {
        var state = CustomerEntitlements(publisher: "demo", customer: "viewer")
        let month = 30 * day
        let first = engine.apply(
            fact("30", "com.entitle.demo.basic.monthly", .autoRenewable, at: start, expires: start.addingTimeInterval(month)),
            renewal: RenewalFact(originalTransactionId: "30", autoRenew: true), to: &state, now: start)
        #expect(first.accessGranted && first.subscription?.status == .active && first.entitlements == ["basic"])

        let renewed = start.addingTimeInterval(month)
        let second = engine.apply(
            fact(
                "31", "com.entitle.demo.basic.monthly", .autoRenewable, at: renewed, expires: renewed.addingTimeInterval(month),
                original: "30"),
            to: &state, now: renewed)
        #expect(second.subscription?.latestTransactionId == "31")
        #expect(second.subscription?.autoRenew == true)

        // Billing fails at the next renewal: grace keeps access, billing retry does not.
        let lapse = renewed.addingTimeInterval(month)
        let grace = RenewalFact(
            originalTransactionId: "30", autoRenew: true, isInBillingRetry: true, gracePeriodExpiresDate: lapse.addingTimeInterval(16 * day)
        )
        let inGrace = engine.apply(
            fact("31", "com.entitle.demo.basic.monthly", .autoRenewable, at: renewed, expires: lapse, original: "30"), renewal: grace,
            to: &state, now: lapse.addingTimeInterval(day))
        #expect(inGrace.accessGranted && inGrace.subscription?.status == .gracePeriod)
        let retry = engine.apply(
            fact("31", "com.entitle.demo.basic.monthly", .autoRenewable, at: renewed, expires: lapse, original: "30"), renewal: grace,
            to: &state, now: lapse.addingTimeInterval(20 * day))
        #expect(!retry.accessGranted && retry.subscription?.status == .billingRetry && retry.reason == .expired)
        // History: entitled during the paid months, not after grace ended.
        #expect(state.entitlements(at: start.addingTimeInterval(45 * day)) == ["basic"])
        #expect(state.entitlements(at: lapse.addingTimeInterval(17 * day)) == [])
    }

    @Test func anUpgradeReplacesTheOldProductAtOnceAndOldViewsNeverWin() {
        var state = CustomerEntitlements(publisher: "demo", customer: "upgrader")
        let month = 30 * day
        _ = engine.apply(
            fact("40", "com.entitle.demo.basic.monthly", .autoRenewable, at: start, expires: start.addingTimeInterval(month)), to: &state,
            now: start)
        let upgradeDate = start.addingTimeInterval(10 * day)
        let upgraded = engine.apply(
            fact(
                "41", "com.entitle.demo.premium.monthly", .autoRenewable, at: upgradeDate, expires: upgradeDate.addingTimeInterval(month),
                original: "40"),
            to: &state, now: upgradeDate)
        #expect(upgraded.entitlements == ["hd", "premium"])
        #expect(upgraded.offerId == "premium")
        #expect(state.entitlements(at: upgradeDate.addingTimeInterval(-1)) == ["basic"])
        // The older transaction arriving late (an out-of-order notification) adds nothing current.
        let late = engine.apply(
            fact("40", "com.entitle.demo.basic.monthly", .autoRenewable, at: start, expires: start.addingTimeInterval(month)), to: &state,
            now: upgradeDate.addingTimeInterval(60))
        #expect(late.subscription?.latestTransactionId == "41")
        #expect(state.entitlements(at: upgradeDate.addingTimeInterval(60)) == ["hd", "premium"])
    }

    @Test func refusalsSayWhy() {
        var state = CustomerEntitlements(publisher: "demo", customer: "c")
        var unknown = fact("50", "com.entitle.demo.unknown", .consumable, at: start)
        #expect(engine.apply(unknown, to: &state, now: start).reason == .unknownProduct)
        unknown.bundleId = "com.other"
        #expect(engine.apply(unknown, to: &state, now: start).reason == .wrongBundle)
        var refunded = fact("51", "com.entitle.demo.issue.2026.11", .nonConsumable, at: start)
        refunded.revocationDate = start.addingTimeInterval(day)
        let decision = engine.apply(refunded, to: &state, now: start.addingTimeInterval(2 * day))
        #expect(!decision.accessGranted && decision.reason == .revoked)
        #expect(state.entitlements(at: start.addingTimeInterval(day / 2)) == ["issue:2026-11"])
    }

    @Test func transfersEndThePreviousOwnersAccess() {
        var previous = CustomerEntitlements(publisher: "demo", customer: "old@example.com")
        var claimant = CustomerEntitlements(publisher: "demo", customer: "new@example.com")
        let purchase = fact(
            "60", "com.entitle.demo.premium.monthly", .autoRenewable, at: start, expires: start.addingTimeInterval(30 * day))
        _ = engine.apply(purchase, to: &previous, now: start)
        #expect(previous.holds(originalTransactionId: "60"))
        #expect(engine.resolveOwnership(claimant: "new@example.com", currentOwner: "old@example.com") == .transfer)
        #expect(engine.resolveOwnership(claimant: "old@example.com", currentOwner: "old@example.com") == nil)
        let transfer = start.addingTimeInterval(5 * day)
        previous.release(originalTransactionId: "60", at: transfer)
        _ = engine.apply(purchase, to: &claimant, now: transfer)
        #expect(previous.entitlements(at: transfer) == [])
        #expect(previous.entitlements(at: transfer.addingTimeInterval(-1)) == ["hd", "premium"])
        #expect(!previous.holds(originalTransactionId: "60"))
        #expect(claimant.entitlements(at: transfer) == ["hd", "premium"])
    }

    @Test func aReversedRefundRestoresAccessAndCreditsAndARefundAgainTakesThemBack() {
        var state = CustomerEntitlements(publisher: "demo", customer: "c")
        var issue = fact("40", "com.entitle.demo.issue.2026.11", .nonConsumable, at: start)
        var credits = fact("41", "com.entitle.demo.credits.100", .consumable, at: start)
        _ = engine.apply(issue, to: &state, now: start)
        _ = engine.apply(credits, to: &state, now: start)
        // Apple's newer views carry the refund, then its reversal, then a second refund.
        for (step, revoked) in [(1.0, true), (2.0, false), (3.0, true)] {
            let date = start.addingTimeInterval(step * day)
            issue.signedDate = date
            credits.signedDate = date
            issue.revocationDate = revoked ? date : nil
            credits.revocationDate = revoked ? date : nil
            _ = engine.apply(issue, to: &state, now: date)
            let decision = engine.apply(credits, to: &state, now: date)
            #expect(state.entitlements(at: date.addingTimeInterval(1)) == (revoked ? [] : ["issue:2026-11"]))
            #expect(decision.creditBalance == (revoked ? 0 : 100))
        }
        #expect(state.credits.entries.map(\.kind) == [.purchase, .clawback, .reinstatement, .clawback])
        // An older view (the first refund) arriving late changes nothing.
        var stale = credits
        stale.signedDate = start.addingTimeInterval(day)
        #expect(!engine.apply(stale, to: &state, now: start.addingTimeInterval(4 * day)).changed)
    }

    /// A view Apple signed before a refund, read before it and applied after it (a job that
    /// asked Apple, then waited for the customer behind the refund's notification), within
    /// the same millisecond as the refund's view: the refund stands, for the holder and for a
    /// former holder's history. Only a view signed later can reverse it.
    @Test func aRefundStandsAgainstAViewSignedInTheSameMillisecond() {
        let month = 30 * day
        let bought = fact("70", "com.entitle.demo.premium.monthly", .autoRenewable, at: start, expires: start.addingTimeInterval(month))
        var refunded = bought
        refunded.revocationDate = start
        for kind in [ProductKind.autoRenewable, .nonConsumable, .consumable] {
            var view = bought
            view.kind = kind
            view.productId =
                kind == .autoRenewable
                ? bought.productId : kind == .consumable ? "com.entitle.demo.credits.100" : "com.entitle.demo.issue.2026.11"
            view.expiresDate = kind == .autoRenewable ? bought.expiresDate : nil
            var revoked = view
            revoked.revocationDate = start
            var state = CustomerEntitlements(publisher: "demo", customer: "c")
            _ = engine.apply(view, to: &state, now: start)
            _ = engine.apply(revoked, to: &state, now: start)
            let stale = engine.apply(view, to: &state, now: start.addingTimeInterval(0.5))
            #expect(!stale.changed && !stale.accessGranted, "\(kind): a view signed with the refund's does not reverse it")
            #expect(state.entitlements(at: start.addingTimeInterval(1)) == [] && state.credits.balance == 0, "\(kind)")
            var later = view
            later.signedDate = start.addingTimeInterval(0.001)
            #expect(engine.apply(later, to: &state, now: start.addingTimeInterval(1)).changed, "\(kind): a later view reverses it")
        }
        // A former holder's history: the same rule.
        var previous = CustomerEntitlements(publisher: "demo", customer: "old@example.com")
        _ = engine.apply(bought, to: &previous, now: start)
        previous.release(originalTransactionId: "70", at: start)
        #expect(engine.amendHistory(with: refunded, in: &previous))
        #expect(!engine.amendHistory(with: bought, in: &previous))
        #expect(previous.transactions["70"]?.revocationDate == start)
    }

    /// A refund Apple reported without a signed view (V1, no API key): a view signed before
    /// it, which an app kept and posts afterwards, does not undo it; one signed later does.
    @Test func aReportedRefundStandsAgainstAViewSignedBeforeIt() {
        var state = CustomerEntitlements(publisher: "demo", customer: "c")
        let issue = fact("80", "com.entitle.demo.issue.2026.11", .nonConsumable, at: start)
        var kept = issue
        kept.signedDate = start.addingTimeInterval(1_800)
        _ = engine.apply(issue, to: &state, now: start)
        let refundedAt = start.addingTimeInterval(3_600)
        #expect(engine.refund(transactionId: "80", at: refundedAt, in: &state).changed)
        let replayed = engine.apply(kept, to: &state, now: refundedAt.addingTimeInterval(60))
        #expect(!replayed.changed && !replayed.accessGranted)
        #expect(state.entitlements(at: refundedAt.addingTimeInterval(60)) == [])
        var reversed = issue
        reversed.signedDate = refundedAt.addingTimeInterval(60)
        #expect(engine.apply(reversed, to: &state, now: refundedAt.addingTimeInterval(120)).accessGranted)
    }

    @Test func aTransferredPurchaseGivesAccessFromTheTransferOnly() {
        var state = CustomerEntitlements(publisher: "demo", customer: "new-owner")
        let transferredAt = start.addingTimeInterval(10 * day)
        _ = engine.apply(
            fact("50", "com.entitle.demo.issue.2026.12", .nonConsumable, at: start), to: &state, now: transferredAt,
            accessFrom: transferredAt)
        #expect(state.entitlements(at: start.addingTimeInterval(day)).isEmpty)
        #expect(state.entitlements(at: transferredAt) == ["issue:2026-12"])
        // The same purchase applied again later (a receipt job) keeps the later start.
        _ = engine.apply(fact("50", "com.entitle.demo.issue.2026.12", .nonConsumable, at: start), to: &state, now: transferredAt)
        #expect(state.entitlements(at: start.addingTimeInterval(day)).isEmpty)
    }

    @Test func olderRenewalInfoNeverOverwritesNewer() {
        var state = CustomerEntitlements(publisher: "demo", customer: "c")
        let expires = start.addingTimeInterval(30 * day)
        let purchase = fact("60", "com.entitle.demo.premium.monthly", .autoRenewable, at: start, expires: expires)
        let newer = RenewalFact(originalTransactionId: "60", autoRenew: false, signedDate: start.addingTimeInterval(2 * day))
        let older = RenewalFact(originalTransactionId: "60", autoRenew: true, signedDate: start.addingTimeInterval(day))
        _ = engine.apply(purchase, renewal: newer, to: &state, now: start.addingTimeInterval(2 * day))
        _ = engine.apply(purchase, renewal: older, to: &state, now: start.addingTimeInterval(3 * day))
        #expect(state.subscriptions["60"]?.autoRenew == false)
    }
}

@Suite struct TransferBackTests {
    let engine: EntitlementEngine
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    init() throws {
        let catalog = try EntitlementCatalog(json: try EntitlementCatalogTests.developmentCatalog)
        engine = EntitlementEngine(publisher: try #require(catalog.publisher("demo")))
    }

    @Test func aPurchaseTransferredAwayAndBackGivesAccessToItsHolderOnly() {
        let purchase = PurchaseFact(
            transactionId: "70", originalTransactionId: "70", productId: "com.entitle.demo.premium.monthly", bundleId: "com.entitle.demo",
            kind: .autoRenewable, environment: "Sandbox", purchaseDate: start, expiresDate: start.addingTimeInterval(30 * day),
            signedDate: start)
        var ann = CustomerEntitlements(publisher: "demo", customer: "ann")
        var bob = CustomerEntitlements(publisher: "demo", customer: "bob")
        _ = engine.apply(purchase, to: &ann, now: start)
        var moment = start
        for step in 1...4 {
            moment = moment.addingTimeInterval(day)
            let (from, to) = step % 2 == 1 ? (ann, bob) : (bob, ann)
            var giver = from
            var taker = to
            _ = engine.apply(purchase, to: &taker, now: moment, accessFrom: moment)
            giver.release(originalTransactionId: "70", at: moment)
            // The taker's own request, run after the transfer.
            let later = moment.addingTimeInterval(60)
            let decision = engine.apply(purchase, to: &taker, now: later)
            #expect(decision.accessGranted && decision.entitlements == ["hd", "premium"], "step \(step): \(decision)")
            #expect(taker.entitlements(at: later) == ["hd", "premium"] && giver.entitlements(at: later).isEmpty, "step \(step)")
            #expect(giver.entitlements(at: moment.addingTimeInterval(-1)) == ["hd", "premium"], "history of step \(step)")
            #expect(taker.subscription(originalTransactionId: "70", at: later)?.status == .active)
            #expect(giver.subscription(originalTransactionId: "70", at: later) == nil)
            if step % 2 == 1 { (ann, bob) = (giver, taker) } else { (bob, ann) = (giver, taker) }
        }
    }
}
