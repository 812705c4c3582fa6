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
        var holder = ClaimRule.Holder.another
        var consumable = false
        var token = false
        /// Seconds before now Apple signed the proof; `nil`: no date.
        var age: TimeInterval?
        var expected: ClaimRule.Outcome
        var reason: EntitlementDecision.Refusal? = nil
        var voucher: ClaimRule.Voucher? = nil

        var testDescription: String {
            "\(road) \(policy) holder=\(holder) consumable=\(consumable) token=\(token) age=\(age.map { "\(Int($0))" } ?? "none")"
        }
    }

    static let cases: [Case] = [
        // The claimant holds it (or shares it already): every road, every policy, any age.
        Case(road: .appKey, policy: .transfer, holder: .claimant, age: 30 * day, expected: .granted),
        Case(road: .appKey, policy: .keep, holder: .claimant, age: nil, expected: .granted),
        Case(road: .appKey, policy: .share, holder: .claimant, age: 30 * day, expected: .granted),
        // Nobody holds it yet: the backend claims it with any proof, an app with Apple's word now.
        Case(road: .secretKey, policy: .share, holder: .nobody, age: 30 * day, expected: .granted),
        Case(road: .secretKey, policy: .keep, holder: .nobody, age: nil, expected: .granted),
        Case(road: .appKey, policy: .transfer, holder: .nobody, age: 60, expected: .granted, voucher: .recentSignature),
        Case(road: .appKey, policy: .keep, holder: .nobody, token: true, age: 30 * day, expected: .granted, voucher: .appAccountToken),
        Case(road: .appKey, policy: .transfer, holder: .nobody, age: 3 * day, expected: .refused, reason: .staleProofOfPurchase),
        Case(road: .appKey, policy: .keep, holder: .nobody, consumable: true, age: nil, expected: .refused, reason: .staleProofOfPurchase),
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
            holder: item.holder, consumable: item.consumable, tokenNamesClaimant: item.token,
            proofSignedAt: item.age.map { Self.now.addingTimeInterval(-$0) }, now: Self.now)
        #expect(decision.outcome == item.expected)
        #expect(decision.reason == item.reason)
        #expect(decision.vouchedBy == item.voucher)
        #expect(decision.heldByAnotherCustomer == (item.holder == .another))
        if decision.reason == .staleProofOfPurchase {
            #expect(decision.message?.contains("ask StoreKit for the current transaction") == true, "the refusal says what to do")
        }
    }

    @Test func thePublishersWindowIsTheLimit() {
        let strict = ClaimRule(road: .appKey, policy: .transfer, proofMaxAgeSeconds: 600)
        let signed = Self.now.addingTimeInterval(-900)
        #expect(
            strict.decide(holder: .another, consumable: false, tokenNamesClaimant: false, proofSignedAt: signed, now: Self.now)
                .reason == .staleProofOfPurchase)
        let lenient = ClaimRule(road: .appKey, policy: .transfer, proofMaxAgeSeconds: 3_600)
        #expect(
            lenient.decide(holder: .another, consumable: false, tokenNamesClaimant: false, proofSignedAt: signed, now: Self.now)
                .outcome == .transfer)
    }
}
