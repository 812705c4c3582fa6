import AppStore
import AppStoreSimulator
import DurationUnits
import Foundation
import Testing

/// Apple's model files (PROVENANCE.md section 2, `SignedModelTests`), signed at run time by a
/// minted Apple-shaped authority, as Apple's own tests do, then verified and decoded.
@Suite struct SignedModelTests {
    let authority: SigningAuthority
    let verifier: SignedDataVerifier

    init() throws {
        authority = try SigningAuthority()
        var configuration = SignedDataVerifier.Configuration(bundleId: "com.example", roots: [authority.root])
        configuration.allowedTestEnvironments = [.localTesting]
        verifier = SignedDataVerifier(configuration: configuration)
    }

    func signed(_ model: String) throws -> String {
        try authority.sign(payload: try Vectors.bytes("appstore-library/swift/models/\(model).json"))
    }

    @Test func subscribedNotification() async throws {
        let payload = try await verifier.verifyNotification(try signed("signedNotification"))
        #expect(payload.notificationType == .subscribed)
        #expect(payload.subtype == .initialBuy)
        #expect(payload.notificationUUID == "002e14d5-51f5-4503-b5a8-c3a1af68eb20")
        #expect(payload.version == "2.0")
        #expect(payload.signedDate?.milliseconds == 1_698_148_900_000)
        let data = try #require(payload.data)
        #expect(data.environment == .localTesting)
        #expect(data.appAppleId == 41234)
        #expect(data.bundleId == "com.example")
        #expect(data.bundleVersion == "1.2.3")
        #expect(data.signedTransactionInfo == "signed_transaction_info_value")
        #expect(data.signedRenewalInfo == "signed_renewal_info_value")
        #expect(data.status == .active)
        #expect(payload.summary == nil)
        #expect(payload.externalPurchaseToken == nil)
    }

    @Test func consumptionRequestNotification() async throws {
        let payload = try await verifier.verifyNotification(try signed("signedConsumptionRequestNotification"))
        #expect(payload.notificationType == .consumptionRequest)
        #expect(payload.subtype == nil)
        #expect(payload.data?.consumptionRequestReason == .unintendedPurchase)
        #expect(payload.data?.appAppleId == 41234)
    }

    @Test func summaryNotification() async throws {
        let payload = try await verifier.verifyNotification(try signed("signedSummaryNotification"))
        #expect(payload.notificationType == .renewalExtension)
        #expect(payload.subtype == .summary)
        #expect(payload.data == nil)
        let summary = try #require(payload.summary)
        #expect(summary.environment == .localTesting)
        #expect(summary.appAppleId == 41234)
        #expect(summary.bundleId == "com.example")
        #expect(summary.productId == "com.example.product")
        #expect(summary.requestIdentifier == "efb27071-45a4-4aca-9854-2a1e9146f265")
        #expect(summary.storefrontCountryCodes == ["CAN", "USA", "MEX"])
        #expect(summary.succeededCount == 5)
        #expect(summary.failedCount == 2)
    }

    @Test func externalPurchaseTokenNotificationsResolveTheirEnvironment() async throws {
        let production = try await verifier.verifyNotification(try signed("signedExternalPurchaseTokenNotification"))
        #expect(production.notificationType == .externalPurchaseToken)
        #expect(production.subtype == .unreported)
        let token = try #require(production.externalPurchaseToken)
        #expect(token.externalPurchaseId == "b2158121-7af9-49d4-9561-1f588205523e")
        #expect(token.tokenCreationDate?.milliseconds == 1_698_148_950_000)
        #expect(token.appAppleId == 55555)
        #expect(token.bundleId == "com.example")
        #expect(token.environment == .production)
        #expect(production.payloadEnvironment == .production)

        let sandbox = try await verifier.verifyNotification(try signed("signedExternalPurchaseTokenSandboxNotification"))
        #expect(sandbox.externalPurchaseToken?.externalPurchaseId == "SANDBOX_b2158121-7af9-49d4-9561-1f588205523e")
        #expect(sandbox.payloadEnvironment == .sandbox)
    }

    @Test func rescindConsentNotification() async throws {
        let payload = try await verifier.verifyNotification(try signed("signedRescindConsentNotification"))
        #expect(payload.notificationType == .rescindConsent)
        let appData = try #require(payload.appData)
        #expect(appData.environment == .localTesting)
        #expect(appData.appAppleId == 41234)
        #expect(appData.bundleId == "com.example")
        #expect(appData.signedAppTransactionInfo == "signed_app_transaction_info_value")
    }

    @Test func transaction() async throws {
        let transaction = try await verifier.verifyTransaction(try signed("signedTransaction"))
        #expect(transaction.originalTransactionId == "12345")
        #expect(transaction.transactionId == "23456")
        #expect(transaction.webOrderLineItemId == "34343")
        #expect(transaction.bundleId == "com.example")
        #expect(transaction.productId == "com.example.product")
        #expect(transaction.subscriptionGroupIdentifier == "55555")
        #expect(transaction.originalPurchaseDate?.milliseconds == 1_698_148_800_000)
        #expect(transaction.purchaseDate?.milliseconds == 1_698_148_900_000)
        #expect(transaction.revocationDate?.milliseconds == 1_698_148_950_000)
        #expect(transaction.expiresDate?.milliseconds == 1_698_149_000_000)
        #expect(transaction.signedDate?.milliseconds == 1_698_148_900_000)
        #expect(transaction.quantity == 1)
        #expect(transaction.type == .autoRenewable)
        #expect(transaction.appAccountToken == "7e3fb20b-4cdb-47cc-936d-99d65f608138")
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.revocationReason == .appIssue)
        #expect(transaction.offerIdentifier == "abc.123")
        #expect(transaction.isUpgraded == true)
        #expect(transaction.offerType == .introductory)
        #expect(transaction.storefront == "USA")
        #expect(transaction.storefrontId == "143441")
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.environment == .localTesting)
        #expect(transaction.price == 10990)
        #expect(transaction.currency == "USD")
        #expect(transaction.offerDiscountType == .payAsYouGo)
        #expect(transaction.appTransactionId == "71134")
        #expect(transaction.offerPeriod == "P1Y")
        // A monthly plan with a 12-month commitment (API 1.21).
        #expect(transaction.billingPlanType == .monthly)
        #expect(transaction.commitmentInfo?.billingPeriodNumber == 3)
        #expect(transaction.commitmentInfo?.totalBillingPeriods == 12)
        #expect(transaction.commitmentInfo?.commitmentExpiresDate?.milliseconds == 1_698_150_000_000)
        #expect(transaction.commitmentInfo?.commitmentPrice == 119_880)

        let revoked = try await verifier.verifyTransaction(try signed("signedTransactionWithRevocation"))
        #expect(revoked.revocationType == .refundProrated)
        #expect(revoked.revocationPercentage == 50000)
    }

    @Test func renewalInfo() async throws {
        let renewal = try await verifier.verifyRenewalInfo(try signed("signedRenewalInfo"))
        #expect(renewal.expirationIntent == .customerCancelled)
        #expect(renewal.originalTransactionId == "12345")
        #expect(renewal.autoRenewProductId == "com.example.product.2")
        #expect(renewal.productId == "com.example.product")
        #expect(renewal.autoRenewStatus == .on)
        #expect(renewal.isInBillingRetryPeriod == true)
        #expect(renewal.priceIncreaseStatus == .notResponded)
        #expect(renewal.gracePeriodExpiresDate?.milliseconds == 1_698_148_900_000)
        #expect(renewal.offerType == .promotional)
        #expect(renewal.offerIdentifier == "abc.123")
        #expect(renewal.signedDate?.milliseconds == 1_698_148_800_000)
        #expect(renewal.environment == .localTesting)
        #expect(renewal.recentSubscriptionStartDate?.milliseconds == 1_698_148_800_000)
        #expect(renewal.renewalDate?.milliseconds == 1_698_148_850_000)
        #expect(renewal.renewalPrice == 9990)
        #expect(renewal.currency == "USD")
        #expect(renewal.offerDiscountType == .payAsYouGo)
        #expect(renewal.eligibleWinBackOfferIds == ["eligible1", "eligible2"])
        #expect(renewal.appAccountToken == "7e3fb20b-4cdb-47cc-936d-99d65f608138")
        #expect(renewal.appTransactionId == "71134")
        #expect(renewal.offerPeriod == "P1Y")
        #expect(renewal.renewalBillingPlanType == .monthly)
        #expect(renewal.commitmentInfo?.commitmentAutoRenewProductId == "com.example.product.commitment")
        #expect(renewal.commitmentInfo?.commitmentAutoRenewStatus == .on)
        #expect(renewal.commitmentInfo?.commitmentRenewalBillingPlanType == .monthly)
        #expect(renewal.commitmentInfo?.commitmentRenewalDate?.milliseconds == 1_698_149_500_000)
        #expect(renewal.commitmentInfo?.commitmentRenewalPrice == 9990)
    }

    @Test func appTransaction() async throws {
        let app = try await verifier.verifyAppTransaction(try signed("appTransaction"))
        #expect(app.receiptType == .localTesting)
        #expect(app.appAppleId == 531412)
        #expect(app.bundleId == "com.example")
        #expect(app.applicationVersion == "1.2.3")
        #expect(app.versionExternalIdentifier == 512)
        #expect(app.receiptCreationDate?.milliseconds == 1_698_148_900_000)
        #expect(app.originalPurchaseDate?.milliseconds == 1_698_148_800_000)
        #expect(app.originalApplicationVersion == "1.1.2")
        #expect(app.deviceVerification == "device_verification_value")
        #expect(app.deviceVerificationNonce == "48ccfa42-7431-4f22-9908-7e88983e105a")
        #expect(app.preorderDate?.milliseconds == 1_698_148_700_000)
        #expect(app.appTransactionId == "71134")
        #expect(app.originalPlatform == "iOS")
    }

    @Test func localTestingIsRefusedByDefault() async throws {
        let strict = SignedDataVerifier(configuration: .init(roots: [authority.root]))
        let error = await #expect(throws: AppStoreError.self) { try await strict.verifyTransaction(try signed("signedTransaction")) }
        #expect(error?.code == .invalidEnvironment)
    }

    @Test func unknownEnumValuesAndNewFieldsDecodeAndKeepTheirRawValue() async throws {
        let payload = Array(
            #"{"notificationType":"SOMETHING_NEW","subtype":"ALSO_NEW","futureField":{"x":1},"data":{"environment":"Staging","bundleId":"com.example","status":9},"signedDate":1698148900000}"#
                .utf8)
        let lenient = SignedDataVerifier(configuration: .init(roots: [authority.root]))
        let decoded = try await lenient.verifyNotification(try authority.sign(payload: payload))
        #expect(decoded.notificationType?.rawValue == "SOMETHING_NEW")
        #expect(decoded.subtype?.rawValue == "ALSO_NEW")
        #expect(decoded.data?.environment?.rawValue == "Staging")
        #expect(decoded.data?.environment?.isKnown == false)
        #expect(decoded.data?.status?.rawValue == 9)
    }
}
