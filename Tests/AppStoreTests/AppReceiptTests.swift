import AppStore
import DurationUnits
import Foundation
import Testing
import X509

/// Real app receipts (PROVENANCE.md section 3) verified and decoded locally.
@Suite struct AppReceiptTests {
    let verifier = AppReceiptVerifier()

    func receipt(_ path: String, with verifier: AppReceiptVerifier? = nil) async throws -> AppReceipt {
        try await (verifier ?? self.verifier).verify(base64: try Vectors.text("receipts/\(path)"))
    }

    func xcodeVerifier() throws -> AppReceiptVerifier {
        var configuration = AppReceiptVerifier.Configuration(roots: [try Vectors.certificate("certs/StoreKitTestCertificate.cer")])
        configuration.allowXcode = true
        return AppReceiptVerifier(configuration: configuration)
    }

    func seconds(_ timestamp: AppleTimestamp?) -> Int64? { timestamp.map { $0.milliseconds / 1000 } }

    @Test func sandboxG5Receipt() async throws {
        let receipt = try await receipt("tpinappreceipt/receipt-sandbox-g5")
        #expect(receipt.receiptType == "ProductionSandbox")
        #expect(receipt.environment == .sandbox)
        #expect(receipt.bundleId == "dev.bonzer.weeka.app")
        #expect(receipt.applicationVersion == "2")
        #expect(receipt.originalApplicationVersion == "1.0")
        #expect(receipt.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2025-12-26T18:39:47Z"))))
        #expect(receipt.inAppPurchases.count == 2)
        let ids = receipt.inAppPurchases.map(\.transactionId)
        #expect(Set(ids) == ["2000001092134138", "2000001092148094"])
        for purchase in receipt.inAppPurchases {
            #expect(purchase.productId == "dev.bonzer.weeka.app.subscription.pro.annual")
            #expect(purchase.originalTransactionId == "2000001092134138")
        }
        let first = try #require(receipt.inAppPurchases.first { $0.transactionId == "2000001092134138" })
        #expect(first.purchaseDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2025-12-26T17:43:07Z"))))
        #expect(first.expiresDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2025-12-26T18:19:07Z"))))
    }

    @Test func sandboxG5DeviceHash() async throws {
        let receipt = try await receipt("tpinappreceipt/receipt-sandbox-g5")
        #expect(receipt.opaqueValue == AppReceiptTestDates.hex("be1dd3ea9bcf4d08652eb539b9e05694"))
        #expect(receipt.sha1Hash == AppReceiptTestDates.hex("2158847543683847e9382a0fc51853cb17abcd6d"))
        #expect(receipt.wasIssued(toDevice: try #require(UUID(uuidString: "956328D9-CC6A-47F4-BE40-6953FB0AB6C7"))))
        #expect(!receipt.wasIssued(toDevice: try #require(UUID(uuidString: "00000000-0000-0000-0000-000000000000"))))
    }

    @Test func productionReceiptVerifiesAtItsCreationDateNotToday() async throws {
        let receipt = try await receipt("tpinappreceipt/receipt-production")
        #expect(receipt.environment == .production)
        #expect(receipt.bundleId == "org.getpure.pure-iphone")
        #expect(receipt.applicationVersion == "15741")
        #expect(receipt.originalApplicationVersion == "434")
        #expect(receipt.appItemId == 690_661_663)
        #expect(receipt.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2024-02-23T17:27:16Z"))))
        #expect(receipt.inAppPurchases.count == 4)
        #expect(receipt.inAppPurchases.allSatisfy { $0.originalTransactionId == "340001196262039" })
        let week = try #require(receipt.inAppPurchases.first { $0.productId == "org.getpure.pure.Week" })
        #expect(week.transactionId == "340001196262039")
        #expect(week.purchaseDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-05-09T23:20:55Z"))))
        #expect(week.expiresDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-05-16T23:20:55Z"))))
        #expect(
            Set(receipt.inAppPurchases.filter { $0.productId == "org.getpure.pure.Month" }.compactMap(\.transactionId))
                == ["340001237736590", "340001264290434", "340001311555626"])

        var today = AppReceiptVerifier.Configuration()
        today.validationTime = .now
        let error = await #expect(throws: AppStoreError.self) {
            try await self.receipt("tpinappreceipt/receipt-production", with: AppReceiptVerifier(configuration: today))
        }
        #expect(error?.code == .certificateExpired)
    }

    @Test func legacySHA1ReceiptWith187Purchases() async throws {
        let receipt = try await receipt("tpinappreceipt/receipt-sandbox-legacy")
        #expect(receipt.bundleId == "com.nutcall.alert")
        #expect(receipt.applicationVersion == "32")
        #expect(receipt.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2020-05-06T18:28:49Z"))))
        #expect(receipt.inAppPurchases.count == 187)
        let products = Dictionary(grouping: receipt.inAppPurchases, by: { $0.productId ?? "" }).mapValues(\.count)
        #expect(products["com.nutcallalert.inapp.optimum"] == 116)
        #expect(products["com.nutcallalert.inapp.pro"] == 39)
        #expect(products["com.nutcallalert.inapp.lite"] == 32)
        #expect(receipt.inAppPurchases.first?.transactionId == "1000000637840752")
        #expect(receipt.inAppPurchases.first?.originalTransactionId == "1000000603177571")

        var today = AppReceiptVerifier.Configuration()
        today.validationTime = .now
        await #expect(throws: AppStoreError.self) {
            try await self.receipt("tpinappreceipt/receipt-sandbox-legacy", with: AppReceiptVerifier(configuration: today))
        }
    }

    @Test func xcodeReceiptsNeedTheStoreKitCertificateAndPermission() async throws {
        let xcode = try await receipt("tpinappreceipt/receipt-xcode", with: try xcodeVerifier())
        #expect(xcode.receiptType == "Xcode")
        #expect(xcode.bundleId == "net.zachariadis.cyclemaps")
        #expect(xcode.applicationVersion == "31.10.0")
        #expect(xcode.inAppPurchases.count == 1)
        let purchase = try #require(xcode.inAppPurchases.first)
        #expect(purchase.productId == "CYCLEMAPS_PREMIUM")
        #expect(purchase.transactionId == "0")
        // "2020-07-22T18:33:14+0100": a numeric offset, not Z.
        #expect(purchase.purchaseDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2020-07-22T17:33:14Z"))))
        #expect(purchase.expiresDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2021-07-22T17:33:14Z"))))

        let refused = await #expect(throws: AppStoreError.self) { try await self.receipt("tpinappreceipt/receipt-xcode") }
        #expect(refused?.code == .invalidCertificateChain)
        let notAllowed = AppReceiptVerifier(
            configuration: .init(roots: [try Vectors.certificate("certs/StoreKitTestCertificate.cer")]))
        await #expect(throws: AppStoreError.self) { try await self.receipt("tpinappreceipt/receipt-xcode", with: notAllowed) }
    }

    @Test func xcodeReceiptsWithIndefiniteLengthBER() async throws {
        let empty = try await Vectors.text("appstore-library/swift/xcode/xcode-app-receipt-empty")
        let verifier = try xcodeVerifier()
        let receipt = try await verifier.verify(base64: empty)
        #expect(receipt.receiptType == "Xcode")
        #expect(receipt.bundleId == "com.example.naturelab.backyardbirds.example")
        #expect(receipt.applicationVersion == "1")
        #expect(receipt.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-10-19T01:18:54Z"))))
        #expect(receipt.expirationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("4001-01-01T00:00:00Z"))))
        #expect(receipt.inAppPurchases.isEmpty)

        let withTransaction = try await verifier.verify(
            base64: try Vectors.text("appstore-library/swift/xcode/xcode-app-receipt-with-transaction"))
        #expect(withTransaction.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-10-19T01:45:40Z"))))
        let purchase = try #require(withTransaction.inAppPurchases.first)
        #expect(withTransaction.inAppPurchases.count == 1)
        #expect(purchase.productId == "pass.premium")
        #expect(purchase.transactionId == "0")
        #expect(purchase.purchaseDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-10-19T01:45:36Z"))))
        #expect(purchase.expiresDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2023-11-19T01:45:36Z"))))
        #expect(purchase.isInIntroOfferPeriod == true)
    }

    @Test func revenueCatSample() async throws {
        let receipt = try await receipt("revenuecat/base64encodedreceiptsample1.txt")
        #expect(receipt.environment == .sandbox)
        #expect(receipt.bundleId == "com.revenuecat.sampleapp")
        #expect(receipt.applicationVersion == "4")
        #expect(receipt.originalApplicationVersion == "1.0")
        #expect(receipt.opaqueValue.map { Data($0).base64EncodedString() } == "S5Yfx+yvdaa9O5w6EvDuZA==")
        #expect(receipt.sha1Hash.map { Data($0).base64EncodedString() } == "deUV5jHlBbtD8cm+XBgY/95o7zw=")
        #expect(seconds(receipt.creationDate) == 1_595_439_548)
        #expect(receipt.expirationDate == nil)
        #expect(receipt.inAppPurchases.count == 9)
        #expect(receipt.inAppPurchases.allSatisfy { $0.originalTransactionId == "1000000692878476" })
        let first = receipt.inAppPurchases[0]
        #expect(first.productId == "com.revenuecat.monthly_4.99.1_week_intro")
        #expect(first.transactionId == "1000000692879214")
        #expect(seconds(first.purchaseDate) == 1_594_755_400)
        #expect(seconds(first.originalPurchaseDate) == 1_594_755_207)
        #expect(seconds(first.expiresDate) == 1_594_755_700)
        #expect(first.isTrialPeriod == false)
        #expect(first.isInIntroOfferPeriod == false)
        #expect(first.webOrderLineItemId == 1_000_000_054_042_695)
        let last = receipt.inAppPurchases[8]
        #expect(last.transactionId == "1000000692878476")
        #expect(seconds(last.purchaseDate) == 1_594_755_206)
        #expect(seconds(last.expiresDate) == 1_594_755_386)
        #expect(last.isTrialPeriod == true)
        #expect(last.webOrderLineItemId == 1_000_000_054_042_694)
        let annual = receipt.inAppPurchases[7]
        #expect(annual.productId == "com.revenuecat.annual_39.99.2_week_intro")
        #expect(annual.transactionId == "1000000696553650")
        #expect(seconds(annual.purchaseDate) == 1_595_439_546)
        #expect(seconds(annual.expiresDate) == 1_595_443_146)
    }

    @Test func stackOverflowReceipts() async throws {
        let second = try await receipt("revenuecat/base64encoded_sandboxReceipt2.txt")
        #expect(second.bundleId == "com.mbaasy.ios.demo")
        #expect(second.applicationVersion == "1")
        #expect(second.originalApplicationVersion == "1.0")
        #expect(second.opaqueValue.map { Data($0).base64EncodedString() } == "xN1AVLC2Gge+tYX2qELgSA==")
        #expect(second.sha1Hash.map { Data($0).base64EncodedString() } == "LgoRW+rBxXAjpb03NJlVqa2Z200=")
        #expect(seconds(second.creationDate) == 1_439_452_246)
        #expect(second.inAppPurchases.count == 7)
        let consumable = second.inAppPurchases[0]
        #expect(consumable.productId == "consumable")
        #expect(consumable.transactionId == "1000000166865231")
        #expect(seconds(consumable.purchaseDate) == 1_438_979_875)
        #expect(consumable.webOrderLineItemId == 0)
        #expect(consumable.expiresDate == nil)
        let monthly = second.inAppPurchases.dropFirst()
        #expect(monthly.allSatisfy { $0.productId == "monthly" && $0.originalTransactionId == "1000000166965150" })
        #expect(monthly.allSatisfy { $0.isInIntroOfferPeriod == nil })
        #expect(Set(monthly.compactMap(\.transactionId)).contains("1000000166967152"))

        let third = try await receipt("revenuecat/base64encoded_sandboxReceipt3.txt")
        #expect(third.bundleId == "com.belive.app.ios")
        #expect(third.applicationVersion == "3")
        #expect(third.opaqueValue.map { Data($0).base64EncodedString() } == "NOI0mwvWYuTsEnpr/RCvJA==")
        #expect(third.sha1Hash.map { Data($0).base64EncodedString() } == "JzhO1BR1kxOVGrCEqQLkwvUuZP8=")
        #expect(seconds(third.creationDate) == 1_542_127_591)
        #expect(third.inAppPurchases.count == 1)
        #expect(third.inAppPurchases.first?.productId == "test2")
        #expect(third.inAppPurchases.first?.transactionId == "1000000472106082")
        #expect(seconds(third.inAppPurchases.first?.purchaseDate) == 1_542_127_591)
    }

    @Test func imdhemyReceipts() async throws {
        let subscription = try await receipt("imdhemy/subscription-receipt-sandbox-2020-11-08-com.twigano.fashion.b64")
        #expect(subscription.receiptType == "ProductionSandbox")
        #expect(subscription.applicationVersion == "36")
        #expect(subscription.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2020-11-08T16:00:57Z"))))
        #expect(subscription.inAppPurchases.count == 42)
        #expect(subscription.inAppPurchases.filter { $0.productId == "month_premium" }.count == 37)
        #expect(subscription.inAppPurchases.filter { $0.productId == "year_premium" }.count == 5)
        #expect(subscription.inAppPurchases.allSatisfy { $0.originalTransactionId == "1000000723811158" })

        let product = try await receipt("imdhemy/product-receipt-sandbox-2020-11-29-com.twigano.fashion.b64")
        #expect(product.applicationVersion == "41")
        #expect(product.inAppPurchases.count == 61)
        #expect(product.inAppPurchases.contains { $0.productId == "boost" && $0.transactionId == "1000000747778008" })

        let single = try await receipt("imdhemy/single-receipt-sandbox-2020-12-29-com.twigano.fashion.b64")
        #expect(single.applicationVersion == "69")
        #expect(single.creationDate == AppleTimestamp(try #require(AppReceiptTestDates.iso("2020-12-29T19:32:54Z"))))
        #expect(single.inAppPurchases.map(\.productId) == ["month_premium"])
        #expect(single.inAppPurchases.first?.transactionId == "1000000759678642")
    }

    @Test func tamperedContentWrongRootAndWrongBundleAreRefused() async throws {
        let original = try #require(Data(base64Encoded: try Vectors.text("tpinappreceipt/receipt-sandbox-g5".receiptPath)))
        var bytes = [UInt8](original)
        // Flip one byte inside the bundle id string of the payload.
        let needle = Array("dev.bonzer.weeka.app".utf8)
        let index = try #require((0..<(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[index] ^= 0x01
        let tampered = await #expect(throws: AppStoreError.self) { try await verifier.verify(der: bytes) }
        #expect(tampered?.code == .invalidSignature)

        let g3Only = AppReceiptVerifier(configuration: .init(roots: AppleRootCertificates.signedDataRoots))
        let wrongRoot = await #expect(throws: AppStoreError.self) {
            try await self.receipt("tpinappreceipt/receipt-sandbox-g5", with: g3Only)
        }
        #expect(wrongRoot?.code == .invalidCertificateChain)

        // The intermediate as the only trusted root: the chain is too short for Apple's shape.
        let g5AsRoot = AppReceiptVerifier(configuration: .init(roots: [try Vectors.certificate("certs/AppleWWDRCAG5.cer")]))
        await #expect(throws: AppStoreError.self) { try await self.receipt("tpinappreceipt/receipt-production", with: g5AsRoot) }

        let otherApp = AppReceiptVerifier(configuration: .init(bundleId: "com.example"))
        let wrongBundle = await #expect(throws: AppStoreError.self) {
            try await self.receipt("tpinappreceipt/receipt-sandbox-g5", with: otherApp)
        }
        #expect(wrongBundle?.code == .invalidAppIdentifier)

        for garbage in ["", "not base64 at all!", Data("hello".utf8).base64EncodedString()] {
            let error = await #expect(throws: AppStoreError.self) { try await verifier.verify(base64: garbage) }
            #expect(error?.code == .invalidFormat)
        }
    }

    @Test func iOS6TransactionReceipts() throws {
        let aporat = try LegacyTransactionReceipt(
            base64: try Vectors.text("receipts/legacy-transaction-receipts/aporat-ios6-transaction-receipt-sandbox-2012.b64"))
        #expect(aporat.transactionId == "1000000046178817")
        #expect(aporat.originalTransactionId == "1000000046178817")
        #expect(aporat.productId == "com.mindmobapp.download")
        #expect(aporat.bundleId == "com.mindmobapp.MindMob")
        #expect(aporat.purchaseDate?.milliseconds == 1_335_798_355_868)
        #expect(aporat.quantity == 1)
        #expect(aporat.environment == "Sandbox")

        let yearly = try LegacyTransactionReceipt(
            base64: try Vectors.text(
                "receipts/legacy-transaction-receipts/revenuecat-unsupportedReceipt1-ios6-transaction-receipt.b64"))
        #expect(yearly.transactionId == "1000000181298734")
        #expect(yearly.originalTransactionId == "1000000180636226")
        #expect(yearly.productId == "yearly")
        #expect(yearly.bundleId == "com.mbaasy.ios.demo")
        #expect(yearly.expiresDate?.milliseconds == 1_448_346_881_000)
        #expect(yearly.webOrderLineItemId == "1000000030938713")
        #expect(yearly.purchaseDate?.milliseconds == 1_447_821_281_000)

        // No base64 padding, and the list on one line.
        let unpadded = try LegacyTransactionReceipt(
            base64: try Vectors.text(
                "receipts/legacy-transaction-receipts/revenuecat-unsupportedReceipt2-ios6-transaction-receipt.b64"))
        #expect(unpadded.transactionId == "1000000181492557")
        #expect(unpadded.originalTransactionId == "1000000181492557")
        #expect(unpadded.productId == "purchaser.consumableFeature")
        #expect(unpadded.bundleId == "com.es.Purchaser")
        #expect(unpadded.purchaseDate?.milliseconds == 1_448_296_347_138)

        let apple = try LegacyTransactionReceipt(base64: try Vectors.text("appstore-library/swift/mock_signed_data/legacyTransaction"))
        #expect(apple.transactionId == "33993399")
    }

    @Test func iOS6ReceiptsAreNotAppReceipts() async throws {
        let text = try Vectors.text("receipts/legacy-transaction-receipts/revenuecat-unsupportedReceipt1-ios6-transaction-receipt.b64")
        let error = await #expect(throws: AppStoreError.self) { try await verifier.verify(base64: text) }
        #expect(error?.code == .invalidFormat)
        #expect(throws: AppStoreError.self) {
            try LegacyTransactionReceipt(base64: try Vectors.text("receipts/tpinappreceipt/receipt-xcode"))
        }
    }
}

enum AppReceiptTestDates {
    static func iso(_ text: String) -> Date? { try? Date(text, strategy: .iso8601) }

    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
            index = next
        }
        return bytes
    }
}

extension String {
    fileprivate var receiptPath: String { "receipts/" + self }
}
