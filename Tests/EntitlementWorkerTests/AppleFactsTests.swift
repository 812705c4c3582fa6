import AppStore
import AppStoreSimulator
import EntitleCore
import Entitlements
import Foundation
import Logging
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
