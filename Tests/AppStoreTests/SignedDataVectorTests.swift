import AppStore
import DurationUnits
import Foundation
import Testing
import X509

/// Real Apple-signed JWS (section 4 and 5 of PROVENANCE.md) and Apple's library test data (section 2).
@Suite struct SignedDataVectorTests {
    let apple = SignedDataVerifier(configuration: .init())

    func appleLibraryVerifier(
        bundleId: String = "com.example", environment: AppStoreEnvironment = .sandbox, appAppleId: Int64 = 1234
    ) throws -> SignedDataVerifier {
        SignedDataVerifier(
            configuration: .init(
                bundleId: bundleId, appAppleId: appAppleId, environment: environment,
                roots: [try Vectors.certificate("appstore-library/swift/certs/testCA.der")]))
    }

    @Test func realTestNotificationVerifiesAtItsSignedDate() async throws {
        let payload = try await apple.verifyNotification(
            try Vectors.text("notifications/v2/real-apple-signed-TEST-notification-sandbox-2022-09.jws"))
        #expect(payload.notificationType == .test)
        #expect(payload.subtype == nil)
        #expect(payload.notificationUUID == "5e09dcfc-205e-4ea1-9883-96676f394992")
        #expect(payload.data?.bundleId == "com.Abilities")
        #expect(payload.data?.environment == .sandbox)
        #expect(payload.data?.appAppleId == nil)
        #expect(payload.version == "2.0")
        #expect(payload.signedDate?.milliseconds == 1_662_122_492_884)
    }

    @Test func theWrappedFormAppleActuallyPostsHoldsTheSameJWS() async throws {
        struct Body: Decodable { var signedPayload: String }
        let body = try JSONDecoder().decode(
            Body.self,
            from: Data(try Vectors.bytes("notifications/v2/real-apple-signed-TEST-notification-sandbox-2022-09.json")))
        let payload = try await apple.verifyNotification(body.signedPayload)
        #expect(payload.notificationUUID == "5e09dcfc-205e-4ea1-9883-96676f394992")
    }

    @Test func realNotificationIsRefusedAtTodaysDateBecauseItsLeafExpired() async throws {
        var configuration = SignedDataVerifier.Configuration()
        configuration.validationTime = .now
        let verifier = SignedDataVerifier(configuration: configuration)
        let error = await #expect(throws: AppStoreError.self) {
            try await verifier.verifyNotification(
                try Vectors.text("notifications/v2/real-apple-signed-TEST-notification-sandbox-2022-09.jws"))
        }
        #expect(error?.code == .certificateExpired)
    }

    @Test func early2022DidRenewWithoutSignedDateTakesTheNestedDateAndVerifiesItsContents() async throws {
        let verified = try await apple.verifyNotificationContents(
            try Vectors.text("notifications/v2/gopay-real-DID_RENEW-sandbox-2022-03.jws"))
        #expect(verified.payload.notificationType == .didRenew)
        #expect(verified.payload.signedDate == nil)
        #expect(verified.payload.data?.bundleId == "com.audaos.audarecorder")
        #expect(verified.payload.data?.bundleVersion == "7")
        #expect(verified.payload.data?.environment == .sandbox)
        #expect(verified.transaction?.transactionId == "2000000004047119")
        #expect(verified.transaction?.originalTransactionId == "2000000000842607")
        #expect(verified.renewalInfo?.autoRenewStatus == .on)
        #expect(verified.renewalInfo?.signedDate?.milliseconds == 1_646_387_008_228)
    }

    @Test func productionConsumptionRequestChecksTheAppAppleId() async throws {
        let jws = try Vectors.text("notifications/v2/gopay-real-CONSUMPTION_REQUEST-production-2023-06.jws")
        let right = SignedDataVerifier(
            configuration: .init(bundleId: "com.jrjj.keysns", appAppleId: 1_601_830_814, environment: .production))
        let verified = try await right.verifyNotificationContents(jws)
        #expect(verified.payload.notificationType == .consumptionRequest)
        #expect(verified.payload.subtype == nil)
        #expect(verified.payload.notificationUUID == "cbff6987-b8d9-43d8-b1dc-07fa8c9fd945")
        #expect(verified.payload.signedDate?.milliseconds == 1_687_941_512_560)
        #expect(verified.payload.data?.appAppleId == 1_601_830_814)
        #expect(verified.payload.data?.bundleVersion == "1")
        let transaction = try #require(verified.transaction)
        #expect(transaction.transactionId == "510001261072921")
        #expect(transaction.originalTransactionId == "510001261072921")
        #expect(transaction.productId == "com.keysns.JR1200")
        #expect(transaction.type == .consumable)
        #expect(transaction.purchaseDate?.milliseconds == 1_687_239_036_000)
        #expect(transaction.quantity == 1)
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.signedDate?.milliseconds == 1_687_941_512_573)
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.storefront == "CHN")
        #expect(transaction.storefrontId == "143465")

        let wrongApp = SignedDataVerifier(configuration: .init(appAppleId: 1_601_830_815))
        let error = await #expect(throws: AppStoreError.self) { try await wrongApp.verifyNotification(jws) }
        #expect(error?.code == .invalidAppIdentifier)
        let sandboxOnly = SignedDataVerifier(configuration: .init(environment: .sandbox))
        let environmentError = await #expect(throws: AppStoreError.self) { try await sandboxOnly.verifyNotification(jws) }
        #expect(environmentError?.code == .invalidEnvironment)
    }

    @Test func realSignedTransactionsDecodeToTheirExpectedValues() async throws {
        let audarecorder = try await apple.verifyTransaction(
            try Vectors.text("signed-data/gopay-real-transaction-sandbox-2022-03-audarecorder.jws"))
        #expect(audarecorder.transactionId == "2000000004047119")
        #expect(audarecorder.originalTransactionId == "2000000000842607")
        #expect(audarecorder.webOrderLineItemId == "2000000000302832")
        #expect(audarecorder.bundleId == "com.audaos.audarecorder")
        #expect(audarecorder.productId == "com.audaos.audarecorder.vip.m2")
        #expect(audarecorder.subscriptionGroupIdentifier == "20929536")
        #expect(audarecorder.purchaseDate?.milliseconds == 1_646_387_016_000)
        #expect(audarecorder.originalPurchaseDate?.milliseconds == 1_646_046_037_000)
        #expect(audarecorder.expiresDate?.milliseconds == 1_646_387_196_000)
        #expect(audarecorder.quantity == 1)
        #expect(audarecorder.type == .autoRenewable)
        #expect(audarecorder.inAppOwnershipType == .purchased)
        #expect(audarecorder.signedDate?.milliseconds == 1_646_387_008_254)
        #expect(audarecorder.environment == .sandbox)

        let withToken = try await apple.verifyTransaction(
            try Vectors.text("signed-data/gopay-real-transaction-sandbox-2022-10-voicerecording-with-appAccountToken.jws"))
        #expect(withToken.transactionId == "2000000184445477")
        #expect(withToken.originalTransactionId == "2000000184445477")
        #expect(withToken.webOrderLineItemId == "2000000013429558")
        #expect(withToken.bundleId == "Com.VoiceRecording.Telephone")
        #expect(withToken.productId == "Com.VoiceRecording.Telephone.103")
        #expect(withToken.subscriptionGroupIdentifier == "21024612")
        #expect(withToken.purchaseDate?.milliseconds == 1_666_615_873_000)
        #expect(withToken.originalPurchaseDate?.milliseconds == 1_666_615_875_000)
        #expect(withToken.expiresDate?.milliseconds == 1_666_615_993_000)
        #expect(withToken.appAccountToken == "207262da-1ac8-4e0a-a399-5aa62a82800f")
        #expect(withToken.offerType == .introductory)
        #expect(withToken.signedDate?.milliseconds == 1_667_559_685_499)

        let renewal = try await apple.verifyTransaction(
            try Vectors.text("signed-data/gopay-real-transaction-sandbox-2022-11-voicerecording-renewal.jws"))
        #expect(renewal.transactionId == "2000000191896422")
        #expect(renewal.originalTransactionId == "2000000184445477")
        #expect(renewal.webOrderLineItemId == "2000000014019133")
        #expect(renewal.purchaseDate?.milliseconds == 1_667_389_704_000)
        #expect(renewal.expiresDate?.milliseconds == 1_667_391_504_000)
        #expect(renewal.appAccountToken == "e4b2c0ab-07a9-4e12-91c9-a76d7d51b72e")
        #expect(renewal.signedDate?.milliseconds == 1_667_561_039_251)
        #expect(renewal.environment == .sandbox)
    }

    @Test func realRenewalInfosDecodeToTheirExpectedValues() async throws {
        let active = try await apple.verifyRenewalInfo(
            try Vectors.text("signed-data/gopay-real-renewalinfo-sandbox-2022-03-audarecorder.jws"))
        #expect(active.originalTransactionId == "2000000000842607")
        #expect(active.autoRenewProductId == "com.audaos.audarecorder.vip.m2")
        #expect(active.productId == "com.audaos.audarecorder.vip.m2")
        #expect(active.autoRenewStatus == .on)
        #expect(active.signedDate?.milliseconds == 1_646_387_008_228)
        #expect(active.environment == .sandbox)

        let expired = try await apple.verifyRenewalInfo(
            try Vectors.text("signed-data/gopay-real-renewalinfo-sandbox-2022-11-voicerecording-expired.jws"))
        #expect(expired.expirationIntent == .customerCancelled)
        #expect(expired.originalTransactionId == "2000000184445477")
        #expect(expired.autoRenewProductId == "Com.VoiceRecording.Telephone.103")
        #expect(expired.productId == "Com.VoiceRecording.Telephone.103")
        #expect(expired.autoRenewStatus == .off)
        #expect(expired.isInBillingRetryPeriod == false)
        #expect(expired.recentSubscriptionStartDate?.milliseconds == 1_667_369_895_000)
        #expect(expired.signedDate?.milliseconds == 1_667_561_039_251)
    }

    @Test func bundleIdsAreComparedExactly() async throws {
        // Apple's bundle ids are case-sensitive: "Com.VoiceRecording.Telephone" has a capital C.
        let lowercase = SignedDataVerifier(configuration: .init(bundleId: "com.voicerecording.telephone"))
        let error = await #expect(throws: AppStoreError.self) {
            try await lowercase.verifyTransaction(
                try Vectors.text("signed-data/gopay-real-transaction-sandbox-2022-11-voicerecording-renewal.jws"))
        }
        #expect(error?.code == .invalidAppIdentifier)
    }

    @Test func appleLibraryTestNotification() async throws {
        let jws = try Vectors.text("appstore-library/swift/mock_signed_data/testNotification")
        let payload = try await appleLibraryVerifier().verifyNotification(jws)
        #expect(payload.notificationType == .test)
        #expect(payload.notificationUUID == "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
        #expect(payload.data?.appAppleId == 1234)
        #expect(payload.signedDate?.milliseconds == 1_681_314_324_000)

        let production = try appleLibraryVerifier(environment: .production)
        let error = await #expect(throws: AppStoreError.self) { try await production.verifyNotification(jws) }
        #expect(error?.code == .invalidEnvironment)
    }

    @Test func appleLibraryTransactionAndRenewalInfo() async throws {
        let transactionJWS = try Vectors.text("appstore-library/swift/mock_signed_data/transactionInfo")
        let transaction = try await appleLibraryVerifier().verifyTransaction(transactionJWS)
        #expect(transaction.environment == .sandbox)
        #expect(transaction.bundleId == "com.example")
        let otherBundle = try appleLibraryVerifier(bundleId: "com.example.x")
        let error = await #expect(throws: AppStoreError.self) { try await otherBundle.verifyTransaction(transactionJWS) }
        #expect(error?.code == .invalidAppIdentifier)

        let renewal = try await appleLibraryVerifier().verifyRenewalInfo(
            try Vectors.text("appstore-library/swift/mock_signed_data/renewalInfo"))
        #expect(renewal.environment == .sandbox)
        #expect(renewal.signedDate?.milliseconds == 1_672_956_154_000)
        // A renewal info given as a transaction is refused as what it is, not as another app's.
        let renewalAsTransaction = await #expect(throws: AppStoreError.self) {
            try await otherBundle.verifyTransaction(try Vectors.text("appstore-library/swift/mock_signed_data/renewalInfo"))
        }
        #expect(renewalAsTransaction?.code == .invalidFormat)
        #expect(renewalAsTransaction?.message.contains("not a transaction") == true)
    }

    @Test func appleLibraryWrongBundleAndMalformedTokens() async throws {
        let verifier = try appleLibraryVerifier()
        let wrongBundle = await #expect(throws: AppStoreError.self) {
            try await verifier.verifyNotification(try Vectors.text("appstore-library/swift/mock_signed_data/wrongBundleId"))
        }
        #expect(wrongBundle?.code == .invalidAppIdentifier)
        let missingX5C = await #expect(throws: AppStoreError.self) {
            try await verifier.verifyNotification(
                try Vectors.text("appstore-library/swift/mock_signed_data/missingX5CHeaderClaim"))
        }
        #expect(missingX5C?.code == .invalidFormat)
        for malformed in ["a.b.c.d", "a.b.c", "", "..", "not a jws"] {
            let error = await #expect(throws: AppStoreError.self) { try await verifier.verifyNotification(malformed) }
            #expect(error?.code == .invalidFormat, "\(malformed)")
        }
    }

    @Test func xcodeSignedDataIsRefusedUnlessXcodeIsAllowed() async throws {
        let transactionJWS = try Vectors.text("appstore-library/swift/xcode/xcode-signed-transaction")
        let refused = await #expect(throws: AppStoreError.self) { try await apple.verifyTransaction(transactionJWS) }
        #expect(refused?.code == .invalidCertificateChain)

        var configuration = SignedDataVerifier.Configuration(bundleId: "com.example.naturelab.backyardbirds.example")
        configuration.allowedTestEnvironments = [.xcode]
        let xcode = SignedDataVerifier(configuration: configuration)
        let transaction = try await xcode.verifyTransaction(transactionJWS)
        #expect(transaction.originalTransactionId == "0")
        #expect(transaction.transactionId == "0")
        #expect(transaction.webOrderLineItemId == "0")
        #expect(transaction.productId == "pass.premium")
        #expect(transaction.subscriptionGroupIdentifier == "6F3A93AB")
        #expect(transaction.purchaseDate?.milliseconds == 1_697_679_936_049)
        #expect(transaction.originalPurchaseDate?.milliseconds == 1_697_679_936_049)
        #expect(transaction.expiresDate?.milliseconds == 1_700_358_336_049)
        #expect(transaction.quantity == 1)
        #expect(transaction.type == .autoRenewable)
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.signedDate?.milliseconds == 1_697_679_936_056)
        #expect(transaction.isUpgraded == false)
        #expect(transaction.offerType == .introductory)
        #expect(transaction.environment == .xcode)
        #expect(transaction.storefront == "USA")
        #expect(transaction.storefrontId == "143441")
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.appAccountToken == nil)
        #expect(transaction.revocationDate == nil)
        #expect(transaction.offerIdentifier == nil)

        let renewal = try await xcode.verifyRenewalInfo(
            try Vectors.text("appstore-library/swift/xcode/xcode-signed-renewal-info"))
        #expect(renewal.originalTransactionId == "0")
        #expect(renewal.autoRenewProductId == "pass.premium")
        #expect(renewal.productId == "pass.premium")
        #expect(renewal.autoRenewStatus == .on)
        #expect(renewal.signedDate?.milliseconds == 1_697_679_936_711)
        #expect(renewal.environment == .xcode)
        #expect(renewal.recentSubscriptionStartDate?.milliseconds == 1_697_679_936_049)
        #expect(renewal.renewalDate?.milliseconds == 1_700_358_336_049)
        #expect(renewal.expirationIntent == nil)
        #expect(renewal.isInBillingRetryPeriod == nil)
        #expect(renewal.priceIncreaseStatus == nil)
        #expect(renewal.gracePeriodExpiresDate == nil)
        #expect(renewal.offerType == nil)

        let app = try await xcode.verifyAppTransaction(
            try Vectors.text("appstore-library/swift/xcode/xcode-signed-app-transaction"))
        #expect(app.appAppleId == nil)
        #expect(app.bundleId == "com.example.naturelab.backyardbirds.example")
        #expect(app.applicationVersion == "1")
        #expect(app.versionExternalIdentifier == nil)
        #expect(app.originalPurchaseDate?.milliseconds == -62_135_769_600_000)
        #expect(app.originalApplicationVersion == "1")
        #expect(app.deviceVerification == "cYUsXc53EbYc0pOeXG5d6/31LGHeVGf84sqSN0OrJi5u/j2H89WWKgS8N0hMsMlf")
        #expect(app.deviceVerificationNonce == "48c8b92d-ce0d-4229-bedf-e61b4f9cfc92")
        #expect(app.preorderDate == nil)
        #expect(app.receiptType == .xcode)
    }
}
