import EntitleCore
import Entitlements
import Foundation
import Testing

/// Two views of one transaction, signed apart, met before either is applied (a claim's proof
/// and Apple's word kept for it) keep one: of dated views, the one the engine would keep
/// (`PurchaseFact.isOlderView`), so that no refund is lost before it reaches the engine. One
/// verifyReceipt answer's entries go by the order Apple lists them.
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
        var priced = view(signedAt: 10, refunded: false, price: "4.99")
        priced.storefront = "FRA"
        let repriced = view(signedAt: 10, refunded: false, price: "5.99")
        #expect(repriced.outranks(priced) && priced.outranks(repriced))
        #expect(merged(priced, repriced)?.price == "5.99" && merged(priced, repriced)?.storefront == "FRA")
        #expect(merged(repriced, priced)?.price == "4.99")
    }

    @Test func aViewWithNoSigningDateIsTheOldest() {
        let undated = view(signedAt: nil, refunded: false)
        let refund = view(signedAt: 10, refunded: true)
        #expect(merged(refund, undated)?.revocationDate != nil)
        #expect(merged(undated, refund)?.revocationDate != nil)
        #expect(!undated.outranks(refund))
        // Of two with none, the one added stands, as before the rule for a millisecond.
        let undatedRefund = view(signedAt: nil, refunded: true)
        #expect(merged(undatedRefund, undated)?.revocationDate == nil)
        #expect(merged(undated, undatedRefund)?.revocationDate != nil)
    }

    /// One verifyReceipt answer dates every entry with its request: a receipt made while a
    /// refund stood lists it in `in_app`, and the latest info after it, reversed, does not.
    @Test func anAnswersLaterEntryReplacesAnEarlierOne() {
        var evidence = AppleEvidence()
        evidence.list(view(signedAt: 10, refunded: true))
        evidence.list(view(signedAt: 10, refunded: false, price: "4.99"))
        #expect(evidence.facts.count == 1)
        #expect(evidence.facts.first?.revocationDate == nil && evidence.facts.first?.price == "4.99")
        var merged = AppleEvidence(facts: [view(signedAt: 10, refunded: true)])
        merged.merge(AppleEvidence(facts: [view(signedAt: 10, refunded: false)]))
        #expect(merged.facts.first?.revocationDate != nil, "views signed apart: the refund stands")
    }
}
