import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import RedisTestSupport
import Testing

/// When a change puts a subscription's next renewal check: at its expiry (with the margin)
/// while it may renew, every `billingRetryCheckInterval` while Apple retries billing, and a
/// change while Apple retries never puts off a check already due (nor leaves none).
@Suite struct RenewalCheckDueTests {
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    struct Due: Equatable {
        var date: Date
        var ifAbsent: Bool
    }

    func dueChecks(before: CustomerEntitlements, after: CustomerEntitlements, now: Date) throws -> [Due] {
        let publisher = try #require(try AppleFactsTests.engine().publisher)
        let change = try ChangeEvents(
            publisher: publisher, renewalCheckMargin: .seconds(60), billingRetryCheckInterval: .seconds(6 * 3_600), now: now
        ).changes(before: before, after: after, version: 2)
        return change.followUps.filter { $0.type == .renewalCheck }.compactMap { check in
            check.dueMs.map { Due(date: Date(timeIntervalSince1970: Double($0) / 1000), ifAbsent: check.ifAbsent ?? false) }
        }
    }

    /// Apple's answer at the check lags: past the expiry, auto-renew still on, no reason.
    /// Nothing has ended (no `expiration`), so Apple is asked again, as in billing retry, until
    /// its answer says how it ended; after 60 days (Apple's longest retry) no more.
    @Test func aPeriodPastItsExpiryWithNoWordFromAppleIsAskedAboutAgain() throws {
        let engine = try AppleFactsTests.engine()
        let lapse = start.addingTimeInterval(30 * day)
        let fact = PurchaseFact(
            transactionId: "90", originalTransactionId: "90", productId: "com.entitle.demo.basic.monthly", bundleId: "com.entitle.demo",
            kind: .autoRenewable, environment: "Sandbox", purchaseDate: start, expiresDate: lapse, signedDate: start)
        var state = CustomerEntitlements(publisher: "demo", customer: "viewer")
        _ = engine.apply(
            fact, renewal: RenewalFact(originalTransactionId: "90", autoRenew: true, signedDate: start), to: &state, now: start)
        var before = state
        let checked = lapse.addingTimeInterval(3_600)
        _ = engine.apply(
            fact, renewal: RenewalFact(originalTransactionId: "90", autoRenew: true, signedDate: checked), to: &state, now: checked)
        #expect(state.subscriptions["90"]?.status == .expired)
        #expect(
            try dueChecks(before: before, after: state, now: checked) == [Due(date: checked.addingTimeInterval(6 * 3_600), ifAbsent: false)]
        )
        let events = LifecycleEvents(publisher: try AppleFactsTests.engine().publisher, now: checked).derive(before: before, after: state)
        #expect(!events.contains { $0.type == .expiration })

        // Apple says it expired (the customer let it go): the expiration, and no more checks.
        before = state
        let said = checked.addingTimeInterval(6 * 3_600)
        _ = engine.apply(
            fact,
            renewal: RenewalFact(originalTransactionId: "90", autoRenew: false, signedDate: said, expirationReason: .customerCancelled),
            to: &state, now: said)
        #expect(try dueChecks(before: before, after: state, now: said).isEmpty)
        let ended = LifecycleEvents(publisher: try AppleFactsTests.engine().publisher, now: said).derive(before: before, after: state)
        #expect(ended.filter { $0.type == .expiration }.map(\.reason) == ["voluntary"], "\(ended.map(\.type))")

        // Never told: asked for 60 days past the expiry, not after.
        var silent = CustomerEntitlements(publisher: "demo", customer: "viewer")
        _ = engine.apply(
            fact, renewal: RenewalFact(originalTransactionId: "90", autoRenew: true, signedDate: start), to: &silent, now: start)
        let late = lapse.addingTimeInterval(61 * day)
        let quiet = silent
        _ = engine.apply(fact, renewal: RenewalFact(originalTransactionId: "90", autoRenew: true, signedDate: late), to: &silent, now: late)
        #expect(try dueChecks(before: quiet, after: silent, now: late).isEmpty)
    }

    @Test func aChangeInBillingRetryDoesNotPutOffTheCheckAlreadyDue() throws {
        let engine = try AppleFactsTests.engine()
        let month = 30 * day
        let lapse = start.addingTimeInterval(month)
        func view(_ renewal: RenewalFact, at now: Date, _ state: inout CustomerEntitlements) {
            let fact = PurchaseFact(
                transactionId: "80", originalTransactionId: "80", productId: "com.entitle.demo.basic.monthly",
                bundleId: "com.entitle.demo", kind: .autoRenewable, environment: "Sandbox", purchaseDate: start, expiresDate: lapse,
                signedDate: start)
            _ = engine.apply(fact, renewal: renewal, to: &state, now: now)
        }
        var state = CustomerEntitlements(publisher: "demo", customer: "viewer")
        view(RenewalFact(originalTransactionId: "80", autoRenew: true, signedDate: start), at: start, &state)
        #expect(state.subscriptions["80"]?.status == .active)

        // Billing fails: the first retry check is due 6 hours on.
        var before = state
        let failed = lapse.addingTimeInterval(60)
        view(RenewalFact(originalTransactionId: "80", autoRenew: true, isInBillingRetry: true, signedDate: failed), at: failed, &state)
        #expect(state.subscriptions["80"]?.status == .billingRetry)
        #expect(
            try dueChecks(before: before, after: state, now: failed) == [Due(date: failed.addingTimeInterval(6 * 3_600), ifAbsent: false)])

        // Five hours on the customer turns auto-renew off: still in billing retry, so the
        // check due in an hour stands (a new date would be 11 hours after the failure); the
        // new date goes in only where the index has none (a check that dropped its entry).
        before = state
        let cancelled = failed.addingTimeInterval(5 * 3_600)
        view(
            RenewalFact(originalTransactionId: "80", autoRenew: false, isInBillingRetry: true, signedDate: cancelled), at: cancelled,
            &state)
        #expect(state.subscriptions["80"]?.autoRenew == false && state.subscriptions["80"]?.status == .billingRetry)
        #expect(
            try dueChecks(before: before, after: state, now: cancelled) == [
                Due(date: cancelled.addingTimeInterval(6 * 3_600), ifAbsent: true)
            ])

        // Billing goes through: the next check is at the new expiry.
        before = state
        let recovered = cancelled.addingTimeInterval(3_600)
        let renewal = PurchaseFact(
            transactionId: "81", originalTransactionId: "80", productId: "com.entitle.demo.basic.monthly", bundleId: "com.entitle.demo",
            kind: .autoRenewable, environment: "Sandbox", purchaseDate: recovered, expiresDate: recovered.addingTimeInterval(month),
            signedDate: recovered)
        _ = engine.apply(
            renewal, renewal: RenewalFact(originalTransactionId: "80", autoRenew: true, signedDate: recovered), to: &state, now: recovered)
        #expect(state.subscriptions["80"]?.status == .active)
        #expect(
            try dueChecks(before: before, after: state, now: recovered) == [
                Due(date: recovered.addingTimeInterval(month + 60), ifAbsent: false)
            ])
    }

    /// In the index: a date put only where there is none leaves an earlier one (or a sweep's
    /// claim) as it is, and stands where a check had dropped the entry; any other replaces it.
    @Test func aDateIfAbsentLeavesTheOneInTheIndex() async throws {
        let redis = try await TestRedis.pool()
        let store = EntitlementStore(redis: redis, prefix: TestRedis.uniquePrefix("renewal-due"), logger: TestRedis.logger)
        let index = store.keys.renewals
        func due(_ original: String) async throws -> String? { try await redis.send(["ZSCORE", index, "demo/" + original]).string }
        try await store.scheduleRenewalChecks([.init(publisher: "demo", originalTransactionId: "1", dueMs: 1_000)])
        try await store.scheduleRenewalChecks([
            .init(publisher: "demo", originalTransactionId: "1", dueMs: 9_000, ifAbsent: true),
            .init(publisher: "demo", originalTransactionId: "2", dueMs: 9_000, ifAbsent: true),
        ])
        #expect(try await due("1") == "1000")
        #expect(try await due("2") == "9000")
        try await store.scheduleRenewalChecks([.init(publisher: "demo", originalTransactionId: "1", dueMs: 5_000)])
        #expect(try await due("1") == "5000")
    }
}
