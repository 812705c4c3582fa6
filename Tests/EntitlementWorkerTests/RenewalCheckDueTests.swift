import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import Testing

/// When a change puts a subscription's next renewal check: at its expiry (with the margin)
/// while it may renew, every `billingRetryCheckInterval` while Apple retries billing, and
/// never later than a check already due because something else changed meanwhile.
@Suite struct RenewalCheckDueTests {
    let day: TimeInterval = 86_400
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    func dueChecks(before: CustomerEntitlements, after: CustomerEntitlements, now: Date) throws -> [Date] {
        let publisher = try #require(try AppleFactsTests.engine().publisher)
        let change = try ChangeEvents(
            publisher: publisher, renewalCheckMargin: .seconds(60), billingRetryCheckInterval: .seconds(6 * 3_600), now: now
        ).changes(before: before, after: after, version: 2)
        return change.followUps.filter { $0.type == .renewalCheck }.compactMap {
            $0.dueMs.map { Date(timeIntervalSince1970: Double($0) / 1000) }
        }
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
        #expect(try dueChecks(before: before, after: state, now: failed) == [failed.addingTimeInterval(6 * 3_600)])

        // Five hours on the customer turns auto-renew off: still in billing retry, so the
        // check due in an hour stands (a new date would be 11 hours after the failure).
        before = state
        let cancelled = failed.addingTimeInterval(5 * 3_600)
        view(
            RenewalFact(originalTransactionId: "80", autoRenew: false, isInBillingRetry: true, signedDate: cancelled), at: cancelled,
            &state)
        #expect(state.subscriptions["80"]?.autoRenew == false && state.subscriptions["80"]?.status == .billingRetry)
        #expect(try dueChecks(before: before, after: state, now: cancelled) == [])

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
        #expect(try dueChecks(before: before, after: state, now: recovered) == [recovered.addingTimeInterval(month + 60)])
    }
}
