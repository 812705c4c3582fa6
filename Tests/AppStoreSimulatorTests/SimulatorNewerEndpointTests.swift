import AppStore
import AppStoreSimulator
import Foundation
import Logging
import Testing

/// The App Store Server API's newer transaction endpoints through the AppStore target's
/// client against the simulator: Set App Account Token (1.16) with Apple's errors, Get App
/// Transaction Info (1.17), Finish Transaction (1.20).
@Suite struct SimulatorNewerEndpointTests {
    @Test func anAppAccountTokenSetByTheServerArrivesOnTheNextTransaction() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            let bought = try await sim.purchase("com.entitle.demo.premium.monthly", #""useIntroductoryOffer":false"#)
            #expect(try await sim.verifier.verifyTransaction(bought.signedTransaction).appAccountToken == nil)
            let token = UUID().uuidString
            try await api.setAppAccountToken(originalTransactionId: bought.originalTransactionId, appAccountToken: token)
            let renewed = try await sim.post("/simulator/subscriptions/\(bought.originalTransactionId)/renew").decode(
                SubscriptionSnapshot.self)
            let next = try await sim.verifier.verifyTransaction(renewed.signedTransaction)
            #expect(next.transactionId != bought.transactionId)
            #expect(next.appAccountToken == token.lowercased())
            #expect(try await sim.verifier.verifyRenewalInfo(try #require(renewed.signedRenewalInfo)).appAccountToken == token.lowercased())

            // Apple's refusals, each with its code.
            let notUUID = await #expect(throws: AppStoreError.self) {
                try await api.setAppAccountToken(originalTransactionId: bought.originalTransactionId, appAccountToken: "not-a-uuid")
            }
            #expect(notUUID?.code == .invalidFormat)
            let notOriginal = await #expect(throws: AppStoreError.self) {
                try await api.setAppAccountToken(originalTransactionId: try #require(next.transactionId), appAccountToken: token)
            }
            #expect(notOriginal?.apiErrorCode == AppleErrorCode.transactionIdIsNotOriginalTransactionId)
            let shared = try await sim.purchase("com.entitle.demo.premium.annual", #""familyShared":true"#)
            let family = await #expect(throws: AppStoreError.self) {
                try await api.setAppAccountToken(originalTransactionId: shared.originalTransactionId, appAccountToken: token)
            }
            #expect(family?.apiErrorCode == AppleErrorCode.familyTransactionNotSupported)
            let unknown = await #expect(throws: AppStoreError.self) {
                try await api.setAppAccountToken(originalTransactionId: "99999999999", appAccountToken: token)
            }
            #expect(unknown?.apiErrorCode == AppleErrorCode.originalTransactionIdNotFound)
        }
    }

    @Test func theAppTransactionIsFoundByAnyOfTheCustomersTransactions() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            let first = try await sim.purchase("com.entitle.demo.credits.100", #""appleAccount":"reader""#)
            let second = try await sim.purchase("com.entitle.demo.pass.30days", #""appleAccount":"reader""#)
            let a = try await sim.verifier.verifyAppTransaction(
                try #require(try await api.getAppTransactionInfo(transactionId: first.transactionId).signedAppTransactionInfo))
            let b = try await sim.verifier.verifyAppTransaction(
                try #require(try await api.getAppTransactionInfo(transactionId: second.transactionId).signedAppTransactionInfo))
            #expect(a.bundleId == SimulatorHarness.bundleId && a.receiptType == .sandbox)
            #expect(a.appTransactionId != nil && a.appTransactionId == b.appTransactionId)
            // Every transaction of the account carries the same id (Apple: appTransactionId, API 1.15).
            #expect(try await sim.verifier.verifyTransaction(first.signedTransaction).appTransactionId == a.appTransactionId)
            let other = try await sim.purchase("com.entitle.demo.credits.100")
            let c = try await sim.verifier.verifyAppTransaction(
                try #require(try await api.getAppTransactionInfo(transactionId: other.transactionId).signedAppTransactionInfo))
            #expect(c.appTransactionId != a.appTransactionId, "one per account")
            let missing = await #expect(throws: AppStoreError.self) { try await api.getAppTransactionInfo(transactionId: "99999999999") }
            #expect(missing?.apiErrorCode == AppleErrorCode.transactionIdNotFound)
        }
    }

    @Test func aFinishedTransactionIsRecordedAtTheSimulator() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            let bought = try await sim.purchase("com.entitle.demo.credits.100")
            #expect(
                try await sim.get("/simulator/transactions/\(bought.transactionId)").decode(TransactionSnapshot.self).finishedDate == nil)
            try await api.finishTransaction(transactionId: bought.transactionId)
            let state = try await sim.get("/simulator/transactions/\(bought.transactionId)").decode(TransactionSnapshot.self)
            #expect(state.finishedDate != nil)
            let missing = await #expect(throws: AppStoreError.self) { try await api.finishTransaction(transactionId: "99999999999") }
            #expect(missing?.apiErrorCode == AppleErrorCode.transactionIdNotFound)
        }
    }
}

/// The simulator's own check of a token the client did not check: Apple's 4000183.
@Suite struct SimulatorAppAccountTokenStoreTests {
    @Test func aTokenThatIsNotAUUIDIsApples4000183() async throws {
        let store = try ServerlessSimulator.make()
        let bought = try await store.purchase(
            PurchaseRequest(bundleId: SimulatorHarness.bundleId, productId: "com.entitle.demo.pass.30days"))
        await #expect(
            throws: AppleAPIError(
                httpStatus: 400, errorCode: 4_000_183, errorMessage: "Invalid request. The app account token field must be a valid UUID.")
        ) {
            try await store.setAppAccountToken(
                bought.originalTransactionId, environment: .sandbox, bundleId: SimulatorHarness.bundleId,
                UpdateAppAccountTokenRequest(appAccountToken: "x"))
        }
    }
}

/// A simulator store without a server, for calls the HTTP client never makes.
enum ServerlessSimulator {
    static func make() throws -> SimulatedAppStore {
        let clock = SimulatedClock()
        return SimulatedAppStore(
            catalog: try SimulatorHarness.demoCatalog, clock: clock, signing: try SigningAuthority(),
            receiptSigning: try ReceiptSigningAuthority(),
            notifications: NotificationDispatcher(configuration: .init(), clock: clock, logger: Logger(label: "test")))
    }
}
