import Entitlements
import Foundation
import Testing

/// `ClaimRule` against a table of every case that decides a claim: who claims, the policy,
/// whether another customer holds the purchase, what it is, and what Apple vouches for.
@Suite struct ClaimRuleTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let day: TimeInterval = 86_400

    struct Case: Sendable, CustomTestStringConvertible {
        var road: ClaimRule.Road
        var policy: TransferPolicy
        var held = true
        var consumable = false
        var token = false
        /// Seconds before now Apple signed the proof; `nil`: no date.
        var age: TimeInterval?
        var expected: ClaimRule.Outcome
        var reason: EntitlementDecision.Refusal? = nil
        var voucher: ClaimRule.Voucher? = nil

        var testDescription: String {
            "\(road) \(policy) held=\(held) consumable=\(consumable) token=\(token) age=\(age.map { "\(Int($0))" } ?? "none")"
        }
    }

    static let cases: [Case] = [
        // Nobody else holds it: every road, every policy, any age.
        Case(road: .appKey, policy: .transfer, held: false, age: 30 * day, expected: .granted),
        Case(road: .appKey, policy: .keep, held: false, age: nil, expected: .granted),
        Case(road: .secretKey, policy: .share, held: false, age: 30 * day, expected: .granted),
        // An app takes another customer's purchase only with Apple's word now.
        Case(road: .appKey, policy: .transfer, age: 3 * day, expected: .refused, reason: .staleProofOfPurchase),
        Case(road: .appKey, policy: .transfer, age: nil, expected: .refused, reason: .staleProofOfPurchase),
        Case(road: .appKey, policy: .transfer, age: day + 1, expected: .refused, reason: .staleProofOfPurchase),
        Case(road: .appKey, policy: .transfer, age: day, expected: .transfer, voucher: .recentSignature),
        Case(road: .appKey, policy: .transfer, age: 60, expected: .transfer, voucher: .recentSignature),
        Case(road: .appKey, policy: .transfer, token: true, age: 300 * day, expected: .transfer, voucher: .appAccountToken),
        Case(road: .appKey, policy: .share, age: 3 * day, expected: .refused, reason: .staleProofOfPurchase),
        Case(road: .appKey, policy: .share, age: 60, expected: .share, voucher: .recentSignature),
        Case(road: .appKey, policy: .share, token: true, age: nil, expected: .share, voucher: .appAccountToken),
        // `keep` keeps, whatever Apple says; consumables never move.
        Case(road: .appKey, policy: .keep, token: true, age: 60, expected: .refused, reason: .ownedByAnotherCustomer),
        Case(road: .secretKey, policy: .keep, age: 60, expected: .refused, reason: .ownedByAnotherCustomer),
        Case(road: .appKey, policy: .transfer, consumable: true, age: 60, expected: .refused, reason: .ownedByAnotherCustomer),
        Case(road: .secretKey, policy: .transfer, consumable: true, age: 60, expected: .refused, reason: .ownedByAnotherCustomer),
        // The publisher's backend keeps today's rules: old proof moves it.
        Case(road: .secretKey, policy: .transfer, age: 300 * day, expected: .transfer, voucher: .secretKey),
        Case(road: .secretKey, policy: .share, age: nil, expected: .share, voucher: .secretKey),
    ]

    @Test(arguments: cases) func aClaimIsDecidedAsTheRuleSays(_ item: Case) {
        let rule = ClaimRule(road: item.road, policy: item.policy, proofMaxAgeSeconds: 86_400)
        let decision = rule.decide(
            heldByAnotherCustomer: item.held, consumable: item.consumable, tokenNamesClaimant: item.token,
            proofSignedAt: item.age.map { Self.now.addingTimeInterval(-$0) }, now: Self.now)
        #expect(decision.outcome == item.expected)
        #expect(decision.reason == item.reason)
        #expect(decision.vouchedBy == item.voucher)
        #expect(decision.heldByAnotherCustomer == item.held)
        if decision.reason == .staleProofOfPurchase {
            #expect(decision.message?.contains("ask StoreKit for the current transaction") == true, "the refusal says what to do")
        }
    }

    @Test func thePublishersWindowIsTheLimit() {
        let strict = ClaimRule(road: .appKey, policy: .transfer, proofMaxAgeSeconds: 600)
        let signed = Self.now.addingTimeInterval(-900)
        #expect(
            strict.decide(heldByAnotherCustomer: true, consumable: false, tokenNamesClaimant: false, proofSignedAt: signed, now: Self.now)
                .reason == .staleProofOfPurchase)
        let lenient = ClaimRule(road: .appKey, policy: .transfer, proofMaxAgeSeconds: 3_600)
        #expect(
            lenient.decide(heldByAnotherCustomer: true, consumable: false, tokenNamesClaimant: false, proofSignedAt: signed, now: Self.now)
                .outcome == .transfer)
    }
}
