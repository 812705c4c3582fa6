import Entitlements
import Foundation
import Testing

/// Which lifecycle events a change makes, derived from the customer before and after it: one
/// test per kind of change, each also checking that applying it again makes nothing.
@Suite struct LifecycleEventsTests {
    let engine: EntitlementEngine
    let publisher: Publisher
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)
    static let monthly = "com.entitle.demo.premium.monthly"
    static let annual = "com.entitle.demo.premium.annual"
    static let basic = "com.entitle.demo.basic.monthly"

    init() throws {
        let catalog = try EntitlementCatalog(json: try EntitlementCatalogTests.developmentCatalog)
        publisher = try #require(catalog.publisher("demo"))
        engine = EntitlementEngine(publisher: publisher)
    }

    func subscription(
        _ id: String, _ product: String = monthly, at date: Date, days: Double = 30, original: String = "100", price: String = "9.99",
        trial: Bool = false
    ) -> PurchaseFact {
        var fact = PurchaseFact(
            transactionId: id, originalTransactionId: original, productId: product, bundleId: "com.entitle.demo", kind: .autoRenewable,
            environment: "Production", purchaseDate: date, expiresDate: date.addingTimeInterval(days * day), signedDate: date,
            price: trial ? "0" : price, currency: "USD", offerDiscountType: trial ? "FREE_TRIAL" : nil, storefront: "USA",
            offerKind: trial ? .introductory : nil)
        fact.isIntroductoryOffer = trial
        return fact
    }

    func renewal(
        autoRenew: Bool = true, next: String? = nil, retrying: Bool = false, grace: Date? = nil, at date: Date,
        reason: RenewalFact.ExpirationReason? = nil, consented: Bool? = nil
    ) -> RenewalFact {
        RenewalFact(
            originalTransactionId: "100", autoRenew: autoRenew, autoRenewProductId: next ?? Self.monthly, isInBillingRetry: retrying,
            gracePeriodExpiresDate: grace, signedDate: date, expirationReason: reason, priceIncreaseConsented: consented)
    }

    /// Applies a change and returns its events; applying the same again must make none.
    func events(
        _ state: inout CustomerEntitlements, at now: Date, _ change: (inout CustomerEntitlements) -> Void
    ) -> [LifecycleEvent] {
        let before = state
        change(&state)
        let events = LifecycleEvents(publisher: publisher, now: now).derive(before: before, after: state)
        var again = state
        change(&again)
        #expect(LifecycleEvents(publisher: publisher, now: now).derive(before: state, after: again).isEmpty, "a rerun makes no event")
        return events
    }

    func types(_ events: [LifecycleEvent]) -> [LifecycleEventType] { events.map(\.type) }

    @Test func aTrialConvertsRenewsAndALapsedSubscriptionResubscribes() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        let trial = subscription("100", at: start, days: 7, trial: true)
        let started = events(&state, at: start) { _ = engine.apply(trial, renewal: renewal(at: start), to: &$0, now: start) }
        #expect(types(started) == [.trialStarted, .offerRedeemed])
        #expect(started[0].priceMilliunits == 0 && started[0].storefront == "USA" && started[0].offerId == "premium")
        #expect(started[0].id == "demo:ann@example.com:trial_started:100")

        let paid = subscription("101", at: start.addingTimeInterval(7 * day))
        let converted = events(&state, at: paid.purchaseDate) { _ = engine.apply(paid, to: &$0, now: paid.purchaseDate) }
        #expect(types(converted) == [.trialConverted] && converted[0].priceMilliunits == 9_990 && converted[0].currency == "USD")

        let next = subscription("102", at: start.addingTimeInterval(37 * day))
        let renewed = events(&state, at: next.purchaseDate) { _ = engine.apply(next, to: &$0, now: next.purchaseDate) }
        #expect(types(renewed) == [.renewal] && renewed[0].resubscribed == nil)

        // Ten days after that period ended, the customer buys again: a resubscription.
        let back = subscription("103", at: start.addingTimeInterval(77 * day))
        let resubscribed = events(&state, at: back.purchaseDate) { _ = engine.apply(back, to: &$0, now: back.purchaseDate) }
        #expect(types(resubscribed) == [.renewal] && resubscribed[0].resubscribed == true)

        // Auto-renew turned off, the period ends, and nothing says so before the customer
        // buys again: the end is told with the resubscription, as Apple's EXPIRED tells it.
        let off = back.purchaseDate.addingTimeInterval(day)
        _ = events(&state, at: off) { _ = engine.apply(back, renewal: renewal(autoRenew: false, at: off), to: &$0, now: off) }
        var told = state
        let ended = (back.expiresDate ?? start).addingTimeInterval(day)
        let expired = events(&told, at: ended) {
            _ = engine.apply(back, renewal: renewal(autoRenew: false, at: ended, reason: .customerCancelled), to: &$0, now: ended)
        }
        let again = subscription("104", at: start.addingTimeInterval(120 * day))
        let afterExpired = events(&told, at: again.purchaseDate) { _ = engine.apply(again, to: &$0, now: again.purchaseDate) }
        let unsaid = events(&state, at: again.purchaseDate) { _ = engine.apply(again, to: &$0, now: again.purchaseDate) }
        #expect(types(expired) == [.expiration] && types(afterExpired) == [.renewal] && afterExpired[0].resubscribed == true)
        #expect(types(unsaid) == [.expiration, .renewal] && unsaid[1].resubscribed == true)
        #expect(unsaid[0].id == expired[0].id && unsaid[0].reason == "voluntary" && unsaid[0].occurredAt == back.expiresDate)
    }

    /// Renewals told late (a backlog of DID_RENEW after an outage, applied one by one): a
    /// period past its expiry with auto-renew on, and no word from Apple, has stopped giving
    /// access but has not ended: no `expiration` between its renewals. Apple's reason, when it
    /// comes, ends it once.
    @Test func aPeriodPastItsExpiryWithNoWordFromAppleHasNotEnded() {
        let periods = (0..<4).map { subscription(String(100 + $0), at: start.addingTimeInterval(Double($0) * 30 * day)) }
        let now = start.addingTimeInterval(125 * day)
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        var logged: [LifecycleEvent] = []
        for fact in periods {
            logged += events(&state, at: now) { _ = engine.apply(fact, renewal: renewal(at: fact.purchaseDate), to: &$0, now: now) }
        }
        #expect(!logged.contains { $0.type == .expiration }, "\(types(logged))")
        #expect(logged.filter { $0.type == .renewal }.count == 3 && logged.allSatisfy { $0.resubscribed == nil })
        #expect(state.subscriptions["100"]?.status == .expired, "access stopped at the last known expiry")
        let said = events(&state, at: now) {
            _ = engine.apply(periods[3], renewal: renewal(autoRenew: false, at: now, reason: .customerCancelled), to: &$0, now: now)
        }
        #expect(types(said).filter { $0 == .expiration } == [.expiration] && said.last?.reason == "voluntary", "\(types(said))")
    }

    /// A refund ended the subscription, then Apple reversed it after the period's expiry with
    /// auto-renew still on: the refund's `expiration` is counted off (`restored`), and the
    /// subscription ends once more only when Apple says how: churned once, not twice.
    @Test func aRefundReversedPastTheExpiryIsChurnedOnce() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        let bought = subscription("100", at: start)
        _ = engine.apply(bought, renewal: renewal(at: start), to: &state, now: start)
        let refundedAt = start.addingTimeInterval(10 * day)
        var refunded = bought
        refunded.revocationDate = refundedAt
        refunded.revocationType = "REFUND_FULL"
        refunded.signedDate = refundedAt
        let refund = events(&state, at: refundedAt) { _ = engine.apply(refunded, to: &$0, now: refundedAt) }
        #expect(types(refund) == [.refund, .expiration] && refund[1].reason == "refund")
        let reversedAt = start.addingTimeInterval(40 * day)
        var reinstated = bought
        reinstated.signedDate = reversedAt
        let reversal = events(&state, at: reversedAt) {
            _ = engine.apply(reinstated, renewal: renewal(at: reversedAt), to: &$0, now: reversedAt)
        }
        #expect(types(reversal) == [.refundReversed] && reversal[0].restored == true, "\(types(reversal))")
        let saidAt = reversedAt.addingTimeInterval(day)
        let said = events(&state, at: saidAt) {
            _ = engine.apply(reinstated, renewal: renewal(autoRenew: false, at: saidAt, reason: .customerCancelled), to: &$0, now: saidAt)
        }
        #expect(types(said).filter { $0 == .expiration }.count == 1, "\(types(said))")
    }

    @Test func autoRenewChangesArecancellationsUncancellationsAndScheduledProductChanges() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        let bought = subscription("100", at: start)
        _ = engine.apply(bought, renewal: renewal(at: start), to: &state, now: start)
        let off = start.addingTimeInterval(day)
        let cancelled = events(&state, at: off) { _ = engine.apply(bought, renewal: renewal(autoRenew: false, at: off), to: &$0, now: off) }
        #expect(types(cancelled) == [.cancellation] && cancelled[0].reason == "voluntary" && cancelled[0].occurredAt == off)
        let on = off.addingTimeInterval(day)
        #expect(types(events(&state, at: on) { _ = engine.apply(bought, renewal: renewal(at: on), to: &$0, now: on) }) == [.uncancellation])
        let down = on.addingTimeInterval(day)
        let scheduled = events(&state, at: down) {
            _ = engine.apply(bought, renewal: renewal(next: Self.basic, at: down), to: &$0, now: down)
        }
        #expect(types(scheduled) == [.productChange])
        #expect(scheduled[0].effective == "atRenewal" && scheduled[0].change == "downgrade" && scheduled[0].toProductId == Self.basic)
        // The downgrade takes effect at renewal: a renewal of the other product, naming the one before.
        let lower = subscription("101", Self.basic, at: start.addingTimeInterval(30 * day), price: "4.99")
        let renewed = events(&state, at: lower.purchaseDate) { _ = engine.apply(lower, to: &$0, now: lower.purchaseDate) }
        #expect(types(renewed) == [.renewal] && renewed[0].fromProductId == Self.monthly && renewed[0].priceMilliunits == 4_990)
    }

    @Test func anUpgradeIsAnImmediateProductChangeWithItsPrice() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        _ = engine.apply(subscription("100", Self.basic, at: start, price: "4.99"), to: &state, now: start)
        let upgrade = subscription("101", Self.monthly, at: start.addingTimeInterval(5 * day))
        let changed = events(&state, at: upgrade.purchaseDate) { _ = engine.apply(upgrade, to: &$0, now: upgrade.purchaseDate) }
        #expect(types(changed) == [.productChange])
        #expect(changed[0].effective == "immediate" && changed[0].change == "upgrade" && changed[0].priceMilliunits == 9_990)
    }

    @Test func billingTroubleIsAnIssueAGracePeriodARecoveryOrAnExpiry() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        let bought = subscription("100", at: start)
        _ = engine.apply(bought, renewal: renewal(at: start), to: &state, now: start)
        let expires = start.addingTimeInterval(30 * day)
        let grace = expires.addingTimeInterval(16 * day)
        let failing = events(&state, at: expires) {
            _ = engine.apply(bought, renewal: renewal(retrying: true, grace: grace, at: expires), to: &$0, now: expires)
        }
        #expect(types(failing) == [.billingIssue, .gracePeriodStarted])
        #expect(failing[0].occurredAt == expires && failing[1].gracePeriodExpiresDate == grace)
        #expect(state.billingRetries.count == 1 && state.billingRetries[0].from == expires)
        let recovered = subscription("101", at: expires.addingTimeInterval(3 * day))
        let back = events(&state, at: recovered.purchaseDate) {
            _ = engine.apply(recovered, renewal: renewal(at: recovered.purchaseDate), to: &$0, now: recovered.purchaseDate)
        }
        #expect(types(back) == [.renewal, .billingRecovered] && back[0].resubscribed == nil)
        #expect(state.billingRetries[0].to == recovered.purchaseDate, "the retry ends where the renewal starts")

        // Billing fails again with no grace period, and Apple gives up 60 days later.
        let second = recovered.expiresDate ?? start
        _ = events(&state, at: second) {
            _ = engine.apply(recovered, renewal: renewal(retrying: true, at: second), to: &$0, now: second)
        }
        let givenUp = second.addingTimeInterval(60 * day)
        let expired = events(&state, at: givenUp) {
            _ = engine.apply(
                recovered, renewal: renewal(autoRenew: false, at: givenUp, reason: .billingError), to: &$0, now: givenUp)
        }
        #expect(types(expired) == [.expiration] && expired[0].reason == "billing" && expired[0].occurredAt == givenUp)
        #expect(state.billingRetries.last?.to == givenUp)
    }

    @Test func aGracePeriodThatEndsWithBillingStillFailingStopsAccess() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        let bought = subscription("100", at: start)
        _ = engine.apply(bought, renewal: renewal(at: start), to: &state, now: start)
        let expires = start.addingTimeInterval(30 * day)
        let grace = expires.addingTimeInterval(16 * day)
        _ = events(&state, at: expires) {
            _ = engine.apply(bought, renewal: renewal(retrying: true, grace: grace, at: expires), to: &$0, now: expires)
        }
        let after = grace.addingTimeInterval(3600)
        let lapsed = events(&state, at: after) {
            _ = engine.apply(bought, renewal: renewal(retrying: true, grace: grace, at: after), to: &$0, now: after)
        }
        #expect(types(lapsed) == [.gracePeriodExpired] && lapsed[0].occurredAt == grace)
        #expect(LifecycleEventType.gracePeriodExpired.legacyName == "expiration", "receivers of the earlier names learn access stopped")
    }

    @Test func refundsCarryTheAmountRefundedAndFamilyRevocationsAreTheirOwnType() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        var bought = subscription("100", Self.annual, at: start, days: 365, price: "99.99")
        _ = engine.apply(bought, to: &state, now: start)
        let when = start.addingTimeInterval(100 * day)
        (bought.revocationDate, bought.revocationType, bought.revocationPercentage, bought.signedDate) =
            (when, "REFUND_PRORATED", 72_603, when)
        let refunded = events(&state, at: when) { _ = engine.apply(bought, to: &$0, now: when) }
        #expect(types(refunded) == [.refund, .expiration])
        #expect(refunded[0].refundMilliunits == 72_596 && refunded[0].revocationPercentage == 72_603)  // 99990 × 0.72603
        #expect(refunded[1].reason == "refund" && refunded[1].occurredAt == when)
        let later = when.addingTimeInterval(day)
        (bought.revocationDate, bought.revocationType, bought.revocationPercentage, bought.signedDate) = (nil, nil, nil, later)
        #expect(types(events(&state, at: later) { _ = engine.apply(bought, to: &$0, now: later) }).first == .refundReversed)

        var family = CustomerEntitlements(publisher: "demo", customer: "kid@example.com")
        var shared = subscription("200", at: start, original: "200")
        shared.isFamilyShared = true
        _ = engine.apply(shared, to: &family, now: start)
        (shared.revocationDate, shared.revocationType, shared.signedDate) = (when, "FAMILY_REVOKE", when)
        let revoked = events(&family, at: when) { _ = engine.apply(shared, to: &$0, now: when) }
        #expect(revoked.first?.type == .revoked && revoked.first?.refundMilliunits == nil && revoked.first?.familyShared == true)
    }

    /// A receipt tells a refund's date, not its kind or share: counted whole, then adjusted
    /// once Apple's signed view says it was prorated. A full refund or a family revocation
    /// told the same way needs no adjustment.
    @Test func aRefundToldByAReceiptFirstIsAdjustedToTheShareAppleSigns() {
        let when = start.addingTimeInterval(100 * day)
        func told(
            first receipt: (inout PurchaseFact) -> Void, then signed: (inout PurchaseFact) -> Void, family: Bool = false
        )
            -> (first: [LifecycleEvent], then: [LifecycleEvent])
        {
            var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
            var bought = subscription("100", Self.annual, at: start, days: 365, price: "99.99")
            bought.isFamilyShared = family
            _ = engine.apply(bought, to: &state, now: start)
            (bought.revocationDate, bought.signedDate) = (when, when)
            receipt(&bought)
            let first = events(&state, at: when) { _ = engine.apply(bought, to: &$0, now: when) }
            let later = when.addingTimeInterval(day)
            bought.signedDate = later
            signed(&bought)
            return (first, events(&state, at: later) { _ = engine.apply(bought, to: &$0, now: later) })
        }
        let prorated = told(first: { _ in }, then: { ($0.revocationType, $0.revocationPercentage) = ("REFUND_PRORATED", 25_000) })
        #expect(types(prorated.first) == [.refund, .expiration] && prorated.first[0].refundMilliunits == 99_990)
        #expect(types(prorated.then) == [.refundAdjusted])
        #expect(prorated.then.first?.refundMilliunits == 24_998 && prorated.then.first?.previousRefundMilliunits == 99_990)
        #expect(prorated.then.first?.occurredAt == when, "on the refund's day, where it was counted")

        let full = told(first: { _ in }, then: { $0.revocationType = "REFUND_FULL" })
        #expect(types(full.first) == [.refund, .expiration] && full.then.isEmpty)
        let family = told(first: { _ in }, then: { $0.revocationType = "FAMILY_REVOKE" }, family: true)
        #expect(family.first.first?.type == .revoked && family.then.isEmpty)
        // Told by the signed view first: the receipt after it changes nothing.
        let signedFirst = told(
            first: { ($0.revocationType, $0.revocationPercentage) = ("REFUND_PRORATED", 25_000) },
            then: {
                ($0.revocationType, $0.revocationPercentage) = (nil, nil)
            })
        #expect(signedFirst.first[0].refundMilliunits == 24_998 && signedFirst.then.isEmpty)
    }

    /// The receipt's refund date need not be the signed view's to the millisecond, and the two
    /// kinds of view may come in any order and again: the refund is adjusted once, to Apple's
    /// share, in the storefront and currency it was counted in.
    @Test func aRefundIsAdjustedOnceWhateverOrderTheViewsComeIn() {
        let refunded = start.addingTimeInterval(100 * day)
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        // Known from an app's receipt only: no storefront, the catalog's price.
        var receipt = subscription("100", at: start)
        (receipt.price, receipt.currency, receipt.storefront, receipt.priceSource) = (nil, nil, nil, nil)
        _ = engine.apply(receipt, to: &state, now: start)
        var signed = receipt
        (signed.price, signed.currency, signed.storefront, signed.priceSource) = ("89.99", "EUR", "FRA", .apple)
        (signed.revocationDate, signed.revocationType, signed.revocationPercentage) = (refunded, "REFUND_PRORATED", 50_000)
        receipt.revocationDate = refunded.addingTimeInterval(0.005)
        var all: [LifecycleEvent] = []
        for (index, view) in [receipt, signed, receipt, signed, receipt].enumerated() {
            var view = view
            let now = refunded.addingTimeInterval(Double(index + 1) * day)
            view.signedDate = now
            all += events(&state, at: now) { _ = engine.apply(view, to: &$0, now: now) }
        }
        let refund = all.filter { $0.type == .refund }
        let adjusted = all.filter { $0.type == .refundAdjusted }
        #expect(refund.count == 1 && adjusted.count == 1, "\(types(all))")
        // Counted at the catalog's price (the offer's 9.99) in USD with no storefront: adjusted the same way.
        #expect(refund.first?.refundMilliunits == 9_990 && refund.first?.currency == "USD" && refund.first?.storefront == nil)
        #expect(adjusted.first?.previousRefundMilliunits == 9_990 && adjusted.first?.refundMilliunits == 4_995)
        #expect(
            adjusted.first?.currency == "USD" && adjusted.first?.storefront == nil && adjusted.first?.occurredAt == refund.first?.occurredAt
        )
        #expect(state.transactions["100"]?.revocationType == "REFUND_PRORATED", "a receipt after the signed view keeps Apple's share")

        // The signed view first, then receipts: counted at the share, never adjusted.
        var other = CustomerEntitlements(publisher: "demo", customer: "bo@example.com")
        let bought = subscription("200", at: start, original: "200")
        _ = engine.apply(bought, to: &other, now: start)
        var told = bought
        (told.revocationDate, told.revocationType, told.revocationPercentage) = (refunded, "REFUND_PRORATED", 50_000)
        var later = bought
        later.revocationDate = refunded.addingTimeInterval(0.005)
        var seen: [LifecycleEvent] = []
        for (index, view) in [told, later, told].enumerated() {
            var view = view
            let now = refunded.addingTimeInterval(Double(index + 1) * day)
            view.signedDate = now
            seen += events(&other, at: now) { _ = engine.apply(view, to: &$0, now: now) }
        }
        #expect(seen.filter { $0.type == .refund }.map(\.refundMilliunits) == [4_995] && !seen.contains { $0.type == .refundAdjusted })
    }

    /// A V1 REFUND of a finished consumable, without the App Store Server API, takes the
    /// whole back as of when the job ran; Apple's signed view (a V2 notification, signed
    /// before that) then tells the share: the refund and the clawback are brought to it, and a
    /// reversal after gives back what the clawback took in the end.
    @Test func aConsumableClawedBackWholeIsSettledToTheShareAppleSigns() {
        var caller = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        var credits = PurchaseFact(
            transactionId: "300", originalTransactionId: "300", productId: "com.entitle.demo.credits.100", bundleId: "com.entitle.demo",
            kind: .consumable, environment: "Production", purchaseDate: start, quantity: 3, signedDate: start, price: "2.97",
            currency: "USD")
        _ = engine.apply(credits, to: &caller, now: start)
        let appleRefunded = start.addingTimeInterval(day)
        let v1 = appleRefunded.addingTimeInterval(60)
        let whole = events(&caller, at: v1) { _ = engine.refund(transactionId: "300", at: v1, in: &$0) }
        #expect(types(whole) == [.refund, .creditsClawedBack] && whole[0].refundMilliunits == 2_970 && whole[1].amount == 300)
        #expect(caller.credits.balance == 0)

        (credits.revocationDate, credits.revocationType, credits.revocationPercentage, credits.signedDate) =
            (appleRefunded, "REFUND_PRORATED", 33_333, appleRefunded)
        var decision: EntitlementDecision?
        let settled = events(&caller, at: v1) {
            let applied = engine.apply(credits, to: &$0, now: v1)
            decision = decision ?? applied  // the first application's, not the rerun's
        }
        #expect(decision?.creditsClawedBack == -200, "what the refund job's result says it moved")
        #expect(types(settled) == [.refundAdjusted, .creditsGranted], "\(types(settled))")
        #expect(settled.first?.refundMilliunits == 990 && settled.first?.previousRefundMilliunits == 2_970)
        #expect(settled.last?.amount == 200 && settled.last?.reason == "refundAdjusted" && settled.last?.balance == 200)
        #expect(caller.credits.balance == 200)
        #expect(caller.credits.entries.last?.amount == -100 && caller.credits.entries.last?.percentage == 33_333)

        let reversedAt = v1.addingTimeInterval(day)
        (credits.revocationDate, credits.revocationType, credits.revocationPercentage, credits.signedDate) = (nil, nil, nil, reversedAt)
        let reversed = events(&caller, at: reversedAt) { _ = engine.apply(credits, to: &$0, now: reversedAt) }
        #expect(reversed.first { $0.type == .refundReversed }?.refundMilliunits == 990)
        #expect(caller.credits.balance == 300, "the 100 the clawback took in the end come back")

        // Refunded again, told by a V1 notification alone: the whole is taken. The first
        // refund's signed view, replayed (an app may post it again), tells of that refund,
        // from before the reversal: nothing of its share is given back.
        let again = reversedAt.addingTimeInterval(day)
        let second = events(&caller, at: again) { _ = engine.refund(transactionId: "300", at: again, in: &$0) }
        #expect(types(second) == [.refund, .creditsClawedBack] && second[1].amount == 300 && caller.credits.balance == 0)
        (credits.revocationDate, credits.revocationType, credits.revocationPercentage, credits.signedDate) =
            (appleRefunded, "REFUND_PRORATED", 33_333, appleRefunded)
        let replayed = events(&caller, at: again) { _ = engine.apply(credits, to: &$0, now: again) }
        #expect(replayed.isEmpty && caller.credits.balance == 0, "\(types(replayed))")
        #expect(caller.transactions["300"]?.revocationType == nil)
        // Apple's own view of the second refund: a full one, so nothing moves.
        (credits.revocationDate, credits.revocationType, credits.revocationPercentage, credits.signedDate) =
            (again.addingTimeInterval(-30), "REFUND_FULL", nil, again.addingTimeInterval(-30))
        let full = events(&caller, at: again) { _ = engine.apply(credits, to: &$0, now: again) }
        #expect(full.isEmpty && caller.credits.balance == 0 && caller.transactions["300"]?.revocationType == "REFUND_FULL")
    }

    @Test func anExtensionAPriceIncreaseAndCreditsAreEvents() {
        var state = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        var bought = subscription("100", at: start)
        _ = engine.apply(bought, renewal: renewal(at: start), to: &state, now: start)
        let was = bought.expiresDate
        bought.expiresDate = was?.addingTimeInterval(10 * day)
        bought.signedDate = start.addingTimeInterval(day)
        let extended = events(&state, at: start.addingTimeInterval(day)) {
            _ = engine.apply(bought, to: &$0, now: start.addingTimeInterval(day))
        }
        #expect(types(extended) == [.extension] && extended[0].previousExpiresDate == was)
        #expect(state.transactions["100"]?.expiresBeforeExtension == was, "the period bought stays known")
        let asked = start.addingTimeInterval(2 * day)
        let increase = events(&state, at: asked) {
            _ = engine.apply(bought, renewal: renewal(at: asked, consented: false), to: &$0, now: asked)
        }
        #expect(types(increase) == [.priceIncrease] && increase[0].consented == false)

        var caller = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        let credits = PurchaseFact(
            transactionId: "300", originalTransactionId: "300", productId: "com.entitle.demo.credits.100", bundleId: "com.entitle.demo",
            kind: .consumable, environment: "Production", purchaseDate: start, signedDate: start, price: "0.99", currency: "USD")
        let granted = events(&caller, at: start) { _ = engine.apply(credits, to: &$0, now: start) }
        #expect(types(granted) == [.nonRenewingPurchase, .creditsGranted])
        #expect(
            granted[0].priceMilliunits == 990 && granted[1].amount == 100 && granted[1].balance == 100 && granted[1].previousBalance == 0)
        let spent = events(&caller, at: start) { _ = $0.credits.spend(30, reference: "call-1", at: start) }
        #expect(types(spent) == [.creditsSpent] && spent[0].amount == 30 && spent[0].balance == 70 && spent[0].reference == "call-1")
    }

    /// Apple's price is the whole transaction's; the catalog's, used when nobody gave one (the
    /// receipt road), is a unit's: three packs bought at once are three packs' revenue.
    @Test func aPurchaseOfSeveralUnitsIsWorthTheirPrice() {
        func bought(_ id: String, quantity: Int, price: String?) -> LifecycleEvent? {
            var caller = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
            let credits = PurchaseFact(
                transactionId: id, originalTransactionId: id, productId: "com.entitle.demo.credits.100", bundleId: "com.entitle.demo",
                kind: .consumable, environment: "Production", purchaseDate: start, quantity: quantity, signedDate: start, price: price,
                currency: price == nil ? nil : "USD")
            return events(&caller, at: start) { _ = engine.apply(credits, to: &$0, now: start) }.first { $0.type == .nonRenewingPurchase }
        }
        let receipt = bought("301", quantity: 3, price: nil)
        #expect(receipt?.priceMilliunits == 2_970 && receipt?.currency == "USD" && receipt?.priceSource == .catalog)
        let signed = bought("302", quantity: 3, price: "2.97")
        #expect(signed?.priceMilliunits == 2_970 && signed?.priceSource == .apple, "Apple's price has the quantity in it already")
        #expect(bought("303", quantity: 1, price: nil)?.priceMilliunits == 990)
    }

    @Test func aPurchaseThatCameByATransferIsNoNewPurchaseAndFormerHoldersAreNotTold() {
        var holder = CustomerEntitlements(publisher: "demo", customer: "ann@example.com")
        var bought = subscription("100", at: start)
        _ = engine.apply(bought, to: &holder, now: start)
        let moved = start.addingTimeInterval(5 * day)
        var taker = CustomerEntitlements(publisher: "demo", customer: "bob@example.com")
        let arrived = events(&taker) { _ = engine.apply(bought, to: &$0, now: moved, accessFrom: moved) }
        #expect(arrived.isEmpty, "the transfer event says it moved: \(types(arrived))")
        let released = events(&holder, at: moved) { $0.release(originalTransactionId: "100", at: moved) }
        #expect(released.isEmpty)
        // A refund Apple reports later: the holder is told, the former holder's history changes quietly.
        let when = moved.addingTimeInterval(day)
        (bought.revocationDate, bought.signedDate) = (when, when)
        #expect(types(events(&taker, at: when) { _ = engine.apply(bought, to: &$0, now: when) }).contains(.refund))
        #expect(events(&holder, at: when) { engine.amendHistory(with: bought, in: &$0) }.isEmpty)
    }

    func events(_ state: inout CustomerEntitlements, _ change: (inout CustomerEntitlements) -> Void) -> [LifecycleEvent] {
        events(&state, at: start, change)
    }
}
