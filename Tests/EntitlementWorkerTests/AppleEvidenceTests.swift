import EntitleCore
import Entitlements
import Foundation
import Testing

/// Two views of one transaction met before either is applied (a claim's proof and Apple's word
/// kept for it, answers read together) keep one: the one the engine would keep
/// (`PurchaseFact.isOlderView`), so that nothing is lost before it reaches the engine.
@Suite struct AppleEvidenceTests {
    let signed = Date(timeIntervalSince1970: 1_790_000_000)

    func view(signedAt offset: TimeInterval?, refunded: Bool, price: String? = nil) -> PurchaseFact {
        var fact = PurchaseFact(
            transactionId: "7", originalTransactionId: "7", productId: "issue.2026.11", bundleId: "com.news", kind: .nonConsumable,
            environment: "Production", purchaseDate: signed.addingTimeInterval(-3_600))
        fact.signedDate = offset.map(signed.addingTimeInterval)
        fact.revocationDate = refunded ? signed : nil
        fact.price = price
        return fact
    }

    func merged(_ first: PurchaseFact, _ second: PurchaseFact) -> PurchaseFact? {
        var evidence = AppleEvidence(facts: [first])
        evidence.merge(AppleEvidence(facts: [second]))
        #expect(evidence.facts.count == 1)
        return evidence.facts.first
    }

    @Test func theLaterSignedViewStandsInEitherOrder() {
        let refund = view(signedAt: 10, refunded: true)
        let reversal = view(signedAt: 20, refunded: false)
        #expect(merged(refund, reversal)?.revocationDate == nil)
        #expect(merged(reversal, refund)?.revocationDate == nil)
        #expect(reversal.outranks(refund) && !refund.outranks(reversal))
    }

    /// A refund is never undone within the millisecond it was signed in: of two views signed
    /// together, the one with it stands, whichever came first.
    @Test func ofTwoViewsSignedTogetherTheRefundedOneStands() {
        let refund = view(signedAt: 10, refunded: true)
        let before = view(signedAt: 10, refunded: false)
        #expect(merged(refund, before)?.revocationDate != nil)
        #expect(merged(before, refund)?.revocationDate != nil)
        #expect(refund.outranks(before) && !before.outranks(refund))
        // Two alike: the one added stands, with what only the other says.
        let priced = view(signedAt: 10, refunded: false, price: "4.99")
        #expect(before.outranks(priced) && priced.outranks(before))
        #expect(merged(priced, before)?.price == "4.99")
    }

    @Test func aViewWithNoSigningDateIsTheOldest() {
        let undated = view(signedAt: nil, refunded: false)
        let refund = view(signedAt: 10, refunded: true)
        #expect(merged(refund, undated)?.revocationDate != nil)
        #expect(merged(undated, refund)?.revocationDate != nil)
        #expect(!undated.outranks(refund))
    }
}
