import Entitlements
import Foundation
import Testing

/// Access granted from a signed transaction verified here while Apple could not be asked:
/// it lasts until its end unless Apple's word comes first, which confirms it (or withdraws
/// it), and the change says so in its events.
@Suite struct TemporaryAccessTests {
    let fixture: ProratedRefundTests
    let day: TimeInterval = 86_400
    var start: Date { fixture.start }

    init() throws { fixture = try ProratedRefundTests() }

    func subscription(_ id: String, at date: Date) -> PurchaseFact {
        var fact = fixture.fact(id, "com.entitle.demo.premium.monthly", .autoRenewable, at: date)
        fact.expiresDate = date.addingTimeInterval(30 * day)
        return fact
    }

    @Test func provisionalAccessEndsAtItsEndUnlessAppleConfirmsIt() {
        let engine = fixture.engine
        var state = CustomerEntitlements(publisher: "demo", customer: "pia@example.com")
        let fact = subscription("s1", at: start)
        let until = start.addingTimeInterval(day)
        let before = state
        let granted = engine.apply(fact, to: &state, now: start, provisionalUntil: until)
        #expect(granted.accessGranted && state.provisional["s1"] == until)
        #expect(state.entitlements(at: start.addingTimeInterval(day - 1)) == ["hd", "premium"])
        #expect(state.entitlements(at: until).isEmpty, "no further than its end, though Apple's expiry is later")
        #expect(state.subscription(originalTransactionId: "s1", at: start)?.provisionalUntil == until)
        #expect(state.subscription(originalTransactionId: "s1", at: until)?.status == .expired)

        // The events say so: the purchase (provisional) and the grant.
        let events = LifecycleEvents(publisher: fixture.engine.publisher, now: start).derive(before: before, after: state)
        #expect(events.map(\.type.rawValue).sorted() == ["initial_purchase", "temporary_access_granted"])
        #expect(events.allSatisfy { $0.provisional == true && $0.provisionalUntil == until })

        // Apple's word on the purchase confirms it: access to Apple's expiry, and an event says so.
        var confirmed = state
        var fresh = fact
        fresh.signedDate = start.addingTimeInterval(3600)
        _ = engine.apply(fresh, to: &confirmed, now: start.addingTimeInterval(3600))
        #expect(confirmed.provisional.isEmpty)
        #expect(confirmed.entitlements(at: until.addingTimeInterval(day)) == ["hd", "premium"])
        #expect(confirmed.subscription(originalTransactionId: "s1", at: until)?.provisionalUntil == nil)
        let after = LifecycleEvents(publisher: fixture.engine.publisher, now: start.addingTimeInterval(3600))
            .derive(before: state, after: confirmed)
        #expect(after.map(\.type) == [.temporaryAccessResolved] && after.first?.confirmed == true, "\(after.map(\.type))")
        #expect(after.first?.provisional == nil)

        // Or Apple says it was refunded: withdrawn from the refund on.
        var withdrawn = state
        let refundedAt = start.addingTimeInterval(7200)
        _ = engine.apply(fixture.refunded(fact, at: refundedAt, type: "REFUND_FULL", percentage: 100_000), to: &withdrawn, now: refundedAt)
        #expect(withdrawn.provisional.isEmpty && withdrawn.entitlements(at: refundedAt).isEmpty)
        let ended = LifecycleEvents(publisher: fixture.engine.publisher, now: refundedAt).derive(before: state, after: withdrawn)
        #expect(ended.first { $0.type == .temporaryAccessResolved }?.confirmed == false, "\(ended.map(\.type))")
        #expect(ended.contains { $0.type == .refund })

        // A confirmed purchase's holder posting its transaction again while Apple is down keeps Apple's word.
        var reposted = confirmed
        _ = engine.apply(fact, to: &reposted, now: start.addingTimeInterval(7200), provisionalUntil: start.addingTimeInterval(9000))
        #expect(reposted.provisional.isEmpty && reposted.entitlements(at: until.addingTimeInterval(day)) == ["hd", "premium"])

        // A transfer away ends it too.
        var released = state
        released.release(originalTransactionId: "s1", at: start.addingTimeInterval(60))
        #expect(released.provisional.isEmpty)
        let left = LifecycleEvents(publisher: fixture.engine.publisher, now: start.addingTimeInterval(60))
            .derive(before: state, after: released)
        #expect(!left.contains { $0.type == .temporaryAccessResolved }, "a transfer is not Apple's word: \(left.map(\.type))")
        // Kept in the stored document, and read back.
        let encoded = try? JSONEncoder().encode(state)
        let decoded = encoded.flatMap { try? JSONDecoder().decode(CustomerEntitlements.self, from: $0) }
        #expect(decoded?.provisional == ["s1": until])
    }

    /// A grant is made once, and only Apple's word since it was made ends it: a notification
    /// Apple signed before the grant (a late retry of the purchase's, which cannot show a
    /// refund made since) leaves it, and the same proof posted again does not extend it. Every
    /// answer about access ends where the grant does.
    @Test func aGrantIsMadeOnceAndEndsOnlyByAppleWordSinceIt() throws {
        let engine = fixture.engine
        var state = CustomerEntitlements(publisher: "demo", customer: "pia@example.com")
        let fact = subscription("s2", at: start.addingTimeInterval(-2 * day))
        let until = start.addingTimeInterval(Double(engine.publisher.temporaryAccessHours) * 3600)
        _ = engine.apply(fact, to: &state, now: start, provisionalUntil: until)
        #expect(state.provisional["s2"] == until)
        let period = try #require(state.periods.first)
        #expect(state.accessEnd(of: period) == until, "the access answer ends with the grant, not at the expiry")

        // Apple's notification of the purchase, signed two days before the grant, told late.
        let late = start.addingTimeInterval(3600)
        var told = state
        let before = told
        _ = engine.apply(fact, to: &told, now: late)
        #expect(told.provisional["s2"] == until && told.entitlements(at: until).isEmpty)
        #expect(
            !LifecycleEvents(publisher: engine.publisher, now: late).derive(before: before, after: told).contains {
                $0.type == .temporaryAccessResolved
            })

        // The same proof posted again after the grant ended: no second grant.
        let again = until.addingTimeInterval(3600)
        _ = engine.apply(fact, to: &told, now: again, provisionalUntil: again.addingTimeInterval(86_400))
        #expect(told.provisional["s2"] == until && told.entitlements(at: again).isEmpty)

        // Apple's answer since the grant ends it.
        var fresh = fact
        fresh.signedDate = again
        _ = engine.apply(fresh, to: &told, now: again)
        #expect(told.provisional.isEmpty && told.entitlements(at: again) == ["hd", "premium"])
    }
}
