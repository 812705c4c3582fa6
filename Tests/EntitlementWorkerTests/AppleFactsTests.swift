import AppStore
import AppStoreSimulator
import EntitleCore
import Entitlements
import Foundation
import Logging
import Reporting
import Testing

/// The road from Apple's signed data to entitlements: the simulator sells, the AppStore
/// target verifies, `AppleFacts` translates, the engine decides.
@Suite struct AppleFactsTests {
    static func simulator() throws -> SimulatedAppStore {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let clock = SimulatedClock()
        return SimulatedAppStore(
            catalog: try SimulatorCatalog(contentsOf: root.appending(path: "Config/simulator-catalog.json")), clock: clock,
            signing: try SigningAuthority(), receiptSigning: try ReceiptSigningAuthority(),
            notifications: NotificationDispatcher(configuration: .init(), clock: clock, logger: Logger(label: "test")))
    }

    static func engine() throws -> EntitlementEngine {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let catalog = try EntitlementCatalog(json: try Data(contentsOf: root.appending(path: "Config/catalog.development.json")))
        return EntitlementEngine(publisher: try #require(catalog.publisher("demo")))
    }

    @Test func signedTransactionsAndReceiptsGiveTheSameFacts() async throws {
        let simulator = try Self.simulator()
        let engine = try Self.engine()
        let verifier = SignedDataVerifier(
            configuration: .init(bundleId: "com.entitle.demo", environment: .sandbox, roots: [simulator.signing.root]))
        var request = PurchaseRequest(bundleId: "com.entitle.demo", productId: "com.entitle.demo.premium.monthly")
        request.appAccountToken = UUID().uuidString
        let purchase = try await simulator.purchase(request)

        let transaction = try await verifier.verifyTransaction(purchase.signedTransaction)
        let fact = try AppleFacts.purchase(transaction)
        let renewal = try AppleFacts.renewal(try await verifier.verifyRenewalInfo(try #require(purchase.signedRenewalInfo)))
        #expect(fact.kind == .autoRenewable)
        #expect(fact.isIntroductoryOffer)
        #expect(fact.appAccountToken == request.appAccountToken?.lowercased())
        var state = CustomerEntitlements(publisher: "demo", customer: "viewer")
        let decision = engine.apply(fact, renewal: renewal, to: &state, now: Date())
        #expect(decision.accessGranted)
        #expect(decision.offerId == "premium")
        #expect(decision.entitlements == ["hd", "premium"])
        #expect(decision.subscription?.autoRenew == true)

        // The legacy road: the app receipt of the same purchase gives the same fact.
        let receipt = try await AppReceiptVerifier(
            configuration: .init(bundleId: "com.entitle.demo", roots: [simulator.receiptSigning.root])
        )
        .verify(base64: purchase.appReceipt)
        let item = try #require(receipt.inAppPurchases.first)
        let legacy = try AppleFacts.purchase(
            item, bundleId: "com.entitle.demo", environment: try #require(receipt.environment), kind: .autoRenewable,
            receiptDate: receipt.creationDate?.date)
        #expect(legacy.transactionId == fact.transactionId)
        #expect(legacy.originalTransactionId == fact.originalTransactionId)
        // Receipts keep whole seconds; signed transactions milliseconds.
        #expect(abs(legacy.purchaseDate.timeIntervalSince(fact.purchaseDate)) < 1)
        #expect(abs(try #require(legacy.expiresDate).timeIntervalSince(try #require(fact.expiresDate))) < 1)
        #expect(legacy.isIntroductoryOffer)
        let again = engine.apply(legacy, to: &state, now: Date())
        #expect(again.accessGranted)
        #expect(again.entitlements == ["hd", "premium"])

        // A refund, as the signed transaction then says.
        let refunded = try await simulator.refund(purchase.transactionId)
        let revoked = try AppleFacts.purchase(try await verifier.verifyTransaction(refunded.signedTransaction))
        let ended = engine.apply(revoked, to: &state, now: Date())
        #expect(!ended.accessGranted)
        #expect(ended.reason == .revoked)
        #expect(ended.entitlements.isEmpty)
    }

    /// verifyReceipt's answer says no price or storefront and less of the offer than a signed
    /// transaction: its view of the same transaction, signed later (a V1 notification's
    /// receipt) or earlier, never erases what the signed one said, so the reports' pieces
    /// (storefront, currency, offer, trial) stay as they were; a price the app reported beside
    /// a receipt never stands against Apple's.
    @Test func aReceiptsViewKeepsWhatOnlyTheSignedTransactionSaid() async throws {
        let simulator = try Self.simulator()
        let engine = try Self.engine()
        let publisher = engine.publisher
        let verifier = SignedDataVerifier(
            configuration: .init(bundleId: "com.entitle.demo", environment: .sandbox, roots: [simulator.signing.root]))
        let purchase = try await simulator.purchase(
            PurchaseRequest(bundleId: "com.entitle.demo", productId: "com.entitle.demo.premium.monthly"))
        let signed = try AppleFacts.purchase(try await verifier.verifyTransaction(purchase.signedTransaction))
        #expect(signed.storefront != nil && signed.price != nil && signed.offerKind == .introductory)
        let answer = try JSONDecoder().decode(
            VerifyReceiptResponse.self,
            from: Data(
                await simulator.verifyReceipt(
                    body: Array(
                        try JSONSerialization.data(withJSONObject: [
                            "receipt-data": purchase.appReceipt, "password": "demo-shared-secret-0123456789abcdef",
                        ])), sandbox: true)))
        var legacy = try AppleFacts.purchase(
            try #require(answer.latestReceiptInfo?.first { $0.transactionId == signed.transactionId }), bundleId: "com.entitle.demo",
            environment: .sandbox, kind: .autoRenewable, requestDate: answer.receipt?.requestDate?.date)
        #expect(legacy.storefront == nil && legacy.price == nil && legacy.offerKind == .introductory)
        #expect(legacy.purchaseDate == signed.purchaseDate && legacy.expiresDate == signed.expiresDate)

        var signedFirst = CustomerEntitlements(publisher: "demo", customer: "viewer")
        _ = engine.apply(signed, to: &signedFirst, now: Date())
        let pieces = ReportTimeline.pieces(of: signedFirst, publisher: publisher)
        #expect(pieces.first?.storefront == signed.storefront && pieces.first?.currency == signed.currency)

        // The receipt's view, signed a second later, with a price the app reported: the
        // access is the same and nothing the signed transaction said is lost.
        legacy.signedDate = try #require(signed.signedDate).addingTimeInterval(1)
        (legacy.price, legacy.currency, legacy.priceSource) = ("0.01", "XXX", .reported)
        let later = engine.apply(legacy, to: &signedFirst, now: Date())
        #expect(later.accessGranted)
        let kept = try #require(signedFirst.transactions[signed.transactionId])
        #expect(kept.signedDate == legacy.signedDate)
        #expect(kept.storefront == signed.storefront && kept.price == signed.price && kept.currency == signed.currency)
        #expect(kept.priceSource == .apple)
        #expect(kept.offerKind == signed.offerKind && kept.offerDiscountType == signed.offerDiscountType)
        #expect(ReportTimeline.pieces(of: signedFirst, publisher: publisher) == pieces)

        // The other way round: a customer first seen by a receipt learns the price and the
        // storefront from the signed transaction signed before it.
        var receiptFirst = CustomerEntitlements(publisher: "demo", customer: "viewer")
        _ = engine.apply(legacy, to: &receiptFirst, now: Date())
        #expect(ReportTimeline.pieces(of: receiptFirst, publisher: publisher).first?.storefront == "")
        let filled = engine.apply(signed, to: &receiptFirst, now: Date())
        #expect(filled.changed)
        #expect(receiptFirst.transactions[signed.transactionId]?.signedDate == legacy.signedDate)
        #expect(receiptFirst.transactions[signed.transactionId]?.priceSource == .apple)
        #expect(ReportTimeline.pieces(of: receiptFirst, publisher: publisher) == pieces)
    }

    /// What two views of one transaction make together: a receipt's refund keeps the kind and
    /// share the signed view gave it; an offer is one view's, never a kind with the other's name.
    @Test func twoViewsOfATransactionMakeOneTrueView() {
        let start = Date(timeIntervalSince1970: 1_790_000_000)
        var signed = PurchaseFact(
            transactionId: "1", originalTransactionId: "1", productId: "p", bundleId: "b", kind: .autoRenewable, environment: "Sandbox",
            purchaseDate: start, offerIdentifier: "SPRING", signedDate: start, price: "4.99", currency: "EUR",
            offerDiscountType: "PAY_AS_YOU_GO",
            storefront: "FRA", offerKind: .offerCode)
        var receipt = PurchaseFact(
            transactionId: "1", originalTransactionId: "1", productId: "p", bundleId: "b", kind: .autoRenewable, environment: "Sandbox",
            purchaseDate: start, isIntroductoryOffer: true, signedDate: start.addingTimeInterval(60), offerKind: .introductory)
        // Kinds that differ: the view's own offer, nothing of the other's.
        var view = receipt.filled(from: signed)
        #expect(view.offerKind == .introductory && view.offerIdentifier == nil && view.offerDiscountType == nil)
        #expect(view.storefront == "FRA" && view.price == "4.99" && view.currency == "EUR" && view.priceSource == .apple)
        // The same kind, or none: the rest of the offer from the other.
        receipt.offerKind = nil
        view = receipt.filled(from: signed)
        #expect(view.offerKind == .offerCode && view.offerIdentifier == "SPRING" && view.offerDiscountType == "PAY_AS_YOU_GO")

        // A prorated refund, then a receipt that says only that it was refunded.
        (signed.revocationDate, signed.revocationType, signed.revocationPercentage) = (
            start.addingTimeInterval(30), "REFUND_PRORATED", 25_000
        )
        receipt.revocationDate = start.addingTimeInterval(30)
        view = receipt.filled(from: signed)
        #expect(view.revocationType == "REFUND_PRORATED" && view.revocationPercentage == 25_000 && view.refundedShare == 25_000)
        // A receipt's date for the refund need not be Apple's to the millisecond (or a V1
        // notification's refund was recorded when its job ran): Apple's kind and share are
        // taken, the view's own date kept.
        receipt.revocationDate = start.addingTimeInterval(90)
        view = receipt.filled(from: signed)
        #expect(view.revocationType == "REFUND_PRORATED" && view.refundedShare == 25_000)
        #expect(view.revocationDate == start.addingTimeInterval(90))
        // Apple's refund after the view's is not the one the view tells; nor is one from
        // before a reversal the transaction has seen since: that refund was another.
        #expect(receipt.filled(from: signed).revocationType == "REFUND_PRORATED")
        var later = signed
        later.revocationDate = start.addingTimeInterval(120)
        #expect(receipt.filled(from: later).revocationType == nil)
        var reversed = receipt
        reversed.reversedAt = start.addingTimeInterval(60)
        #expect(reversed.filled(from: signed).revocationType == nil && reversed.filled(from: signed).reversedAt == reversed.reversedAt)
        // A view that says its own kind keeps it.
        var full = receipt
        full.revocationType = "REFUND_FULL"
        #expect(full.filled(from: signed).revocationType == "REFUND_FULL")
        // A newer view without the refund (Apple reversed it) says so: nothing of it comes back.
        receipt.revocationDate = nil
        view = receipt.filled(from: signed)
        #expect(view.revocationDate == nil && view.revocationType == nil && view.revocationPercentage == nil)
    }

    @Test func incompleteDataIsRefusedByName() throws {
        var transaction = JWSTransaction()
        transaction.transactionId = "1"
        #expect(throws: AppleFacts.Incomplete(field: "productId")) { try AppleFacts.purchase(transaction) }
        transaction.productId = "p"
        transaction.bundleId = "b"
        transaction.type = ProductType(rawValue: "Gift Card")
        #expect(throws: AppleFacts.Incomplete(field: "type")) { try AppleFacts.purchase(transaction) }
    }
}

/// Apple's own vector of a prorated refund (`revocationPercentage` 50000) reads as 50 %.
@Suite struct ProratedRefundFactsTests {
    @Test func applesProratedRefundVectorReadsAsHalf() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let model = try Data(
            contentsOf: root.appending(path: "Tests/Vectors/appstore-library/swift/models/signedTransactionWithRevocation.json"))
        let authority = try SigningAuthority()
        var configuration = SignedDataVerifier.Configuration(bundleId: "com.example", roots: [authority.root])
        configuration.allowedTestEnvironments = [.localTesting]
        let transaction = try await SignedDataVerifier(configuration: configuration).verifyTransaction(
            try authority.sign(payload: [UInt8](model)))
        let fact = try AppleFacts.purchase(transaction)
        #expect(fact.revocationType == "REFUND_PRORATED")
        #expect(fact.revocationPercentage == 50000)
        #expect(fact.isProratedRefund && fact.refundedShare == 50000)

        // The same refund of 4 consumable items in the demo app: half their credits go.
        let engine = try AppleFactsTests.engine()
        var refunded = fact
        (refunded.kind, refunded.productId, refunded.bundleId, refunded.environment, refunded.quantity) =
            (.consumable, "com.entitle.demo.credits.100", "com.entitle.demo", "Sandbox", 4)
        var bought = refunded
        (bought.revocationDate, bought.revocationType, bought.revocationPercentage) = (nil, nil, nil)
        bought.signedDate = fact.purchaseDate
        refunded.signedDate = try #require(fact.revocationDate)
        var state = CustomerEntitlements(publisher: "demo", customer: "caller@example.com")
        #expect(engine.apply(bought, to: &state, now: fact.purchaseDate).creditsAdded == 400)
        let decision = engine.apply(refunded, to: &state, now: try #require(fact.revocationDate))
        #expect(decision.creditsClawedBack == 200 && decision.creditBalance == 200)
    }
}
