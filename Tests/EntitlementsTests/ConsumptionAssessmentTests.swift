import Entitlements
import Foundation
import Testing

/// What a consumption answer says of a purchase, against a reference: credits spent first
/// in, first out, modelled credit by credit.
@Suite struct ConsumptionAssessmentTests {
    /// The prorated-refund tests' demo engine and purchases.
    let fixture: ProratedRefundTests
    var engine: EntitlementEngine { fixture.engine }
    var start: Date { fixture.start }

    init() throws { fixture = try ProratedRefundTests() }

    func fact(_ id: String, _ product: String, _ kind: ProductKind, at date: Date, quantity: Int = 1) -> PurchaseFact {
        fixture.fact(id, product, kind, at: date, quantity: quantity)
    }

    /// A seeded walk of purchases (100 to 300 credits) and spends; after every step each
    /// purchase's spent credits equal the reference's, where every credit is one item in a
    /// queue and a spend takes the oldest.
    @Test(arguments: [1, 2, 3, 4, 5]) func spentCreditsFollowTheOldestFirst(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        var state = CustomerEntitlements(publisher: "demo", customer: "walker@example.com")
        var queue: [String] = []  // one entry per unspent credit, oldest first
        var spent: [String: Int] = [:]
        var granted: [String: Int] = [:]
        for step in 0..<200 {
            let now = start.addingTimeInterval(Double(step) * 60)
            if queue.isEmpty || random.next(upTo: 3) == 0 {
                let id = "t\(step)"
                let quantity = 1 + random.next(upTo: 3)
                _ = engine.apply(fact(id, "com.entitle.demo.credits.100", .consumable, at: now, quantity: quantity), to: &state, now: now)
                queue += Array(repeating: id, count: 100 * quantity)
                granted[id] = 100 * quantity
            } else {
                let amount = 1 + random.next(upTo: min(queue.count, 250))
                #expect(state.credits.spend(amount, reference: "s\(step)", at: now) == .spent)
                for id in queue.prefix(amount) { spent[id, default: 0] += 1 }
                queue.removeFirst(amount)
            }
            for (id, credits) in granted {
                let use = ConsumptionAssessment.creditUse(of: id, in: state.credits)
                #expect(use?.granted == credits && use?.used == spent[id, default: 0], "seed \(seed), step \(step), \(id)")
            }
        }
        #expect(ConsumptionAssessment.creditUse(of: "never", in: state.credits) == nil)
    }

    @Test func eachKindIsAssessedAsAppleAsks() {
        var state = CustomerEntitlements(publisher: "demo", customer: "kinds@example.com")
        let credits = fact("c", "com.entitle.demo.credits.100", .consumable, at: start)
        let book = fact("b", "com.entitle.demo.issue.2026.11", .nonConsumable, at: start)
        var pass = fact("p", "com.entitle.demo.pass.30days", .nonRenewing, at: start)
        pass.expiresDate = start.addingTimeInterval(30 * 86_400)
        var subscription = fact("s", "com.entitle.demo.premium.monthly", .autoRenewable, at: start)
        subscription.expiresDate = start.addingTimeInterval(30 * 86_400)
        for purchase in [credits, book, pass, subscription] { _ = engine.apply(purchase, to: &state, now: start) }
        _ = state.credits.spend(25, reference: "r", at: start)
        let now = start.addingTimeInterval(15 * 86_400)

        #expect(ConsumptionAssessment.assess(credits, holder: state, now: now).consumptionPercentage == 25_000)
        let bookAnswer = ConsumptionAssessment.assess(book, holder: state, now: now)
        #expect(bookAnswer.delivered && bookAnswer.consumptionPercentage == nil)
        #expect(ConsumptionAssessment.assess(pass, holder: state, now: now).consumptionPercentage == 50_000)
        #expect(
            ConsumptionAssessment.assess(pass, holder: state, now: start.addingTimeInterval(60 * 86_400)).consumptionPercentage == 100_000)
        let subscriptionAnswer = ConsumptionAssessment.assess(subscription, holder: state, now: now)
        #expect(subscriptionAnswer.delivered && subscriptionAnswer.consumptionPercentage == nil, "Apple takes none for a subscription")
        // Held but never granted: not delivered; 0 % where a percentage may be sent at all.
        let other = CustomerEntitlements(publisher: "demo", customer: "other@example.com")
        #expect(!ConsumptionAssessment.assess(book, holder: other, now: now).delivered)
        let stray = ConsumptionAssessment.assess(credits, holder: other, now: now)
        #expect(!stray.delivered && stray.consumptionPercentage == 0)
        #expect(ConsumptionAssessment.assess(subscription, holder: other, now: now).consumptionPercentage == nil)
    }

    /// Refunds and their reversals: a refund takes its own purchase's credits first, then, when
    /// those were spent, others' (which then count as used: the customer no longer has them);
    /// a reversal gives them back where they were taken.
    @Test func refundsTakeTheirOwnCreditsFirstAndReversalsGiveThemBack() {
        var state = CustomerEntitlements(publisher: "demo", customer: "refunds@example.com")
        let first = fact("p1", "com.entitle.demo.credits.100", .consumable, at: start)
        let second = fact("p2", "com.entitle.demo.credits.100", .consumable, at: start.addingTimeInterval(60))
        _ = engine.apply(first, to: &state, now: start)
        _ = engine.apply(second, to: &state, now: start.addingTimeInterval(60))
        #expect(state.credits.spend(100, reference: "calls", at: start.addingTimeInterval(120)) == .spent)
        func used(_ id: String) -> Int? { ConsumptionAssessment.creditUse(of: id, in: state.credits)?.used }
        #expect(used("p1") == 100 && used("p2") == 0)
        // p1 refunded: its credits were spent, so the refund takes p2's.
        let refundedAt = start.addingTimeInterval(180)
        _ = engine.apply(fixture.refunded(first, at: refundedAt, type: "REFUND_FULL", percentage: 100_000), to: &state, now: refundedAt)
        #expect(state.credits.balance == 0)
        #expect(used("p1") == 100 && used("p2") == 100, "p2's credits are gone, and were not refunded")
        // The refund reversed: p2 has its credits back.
        let reversedAt = start.addingTimeInterval(240)
        _ = engine.apply(fixture.reversed(first, at: reversedAt), to: &state, now: reversedAt)
        #expect(state.credits.balance == 100)
        #expect(used("p1") == 100 && used("p2") == 0)

        // A purchase refunded before any use: its own credits go back, none of it was used.
        var unused = CustomerEntitlements(publisher: "demo", customer: "unused@example.com")
        _ = engine.apply(first, to: &unused, now: start)
        _ = engine.apply(fixture.refunded(first, at: refundedAt, type: "REFUND_FULL", percentage: 100_000), to: &unused, now: refundedAt)
        #expect(ConsumptionAssessment.creditUse(of: "p1", in: unused.credits)?.used == 0)
    }
}

/// SplitMix64: the same walk for the same seed on every machine.
struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next(upTo bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }
}
