import AppStore
import DurationUnits
import Foundation
import HTTPTestSupport
import Hummingbird
import Testing

/// The verifyReceipt client against a real HTTP server on loopback playing Apple's two endpoints.
@Suite struct VerifyReceiptClientTests {
    func client(
        _ base: String, secret: String? = nil, exclude: Bool = false, timeout: Duration = .seconds(10)
    )
        -> VerifyReceiptClient
    {
        var configuration = VerifyReceiptClient.Configuration(sharedSecret: secret)
        configuration.productionURL = base + "/prod/verifyReceipt"
        configuration.sandboxURL = base + "/sandbox/verifyReceipt"
        configuration.excludeOldTransactions = exclude
        configuration.timeout = timeout
        return VerifyReceiptClient(configuration: configuration)
    }

    @Test func aSandboxReceiptGoesToProductionFirstThenSandbox() async throws {
        let log = RequestLog()
        let sample = try Vectors.bytes("receipts/revenuecat/verifyReceiptSample1.json")
        let router = Router()
        router.post("prod/verifyReceipt") { request, _ in
            _ = try await log.record(request)
            return Response.json(#"{"status":21007}"#)
        }
        router.post("sandbox/verifyReceipt") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: sample)
        }
        let result = try await LoopbackServer.run(router) { base in
            try await client(base, secret: "s3cret", exclude: true).verify(receiptData: "cmVjZWlwdA==")
        }
        #expect(result.outcome == .valid)
        #expect(result.environment == .sandbox)
        let response = result.response
        #expect(response.status == 0)
        #expect(response.environment == "Sandbox")
        #expect(response.receipt?.receiptType == "ProductionSandbox")
        #expect(response.receipt?.bundleId == "com.revenuecat.sampleapp")
        #expect(response.receipt?.receiptCreationDate?.milliseconds == 1_595_439_548_000)
        #expect(response.receipt?.requestDate?.milliseconds == 1_595_440_486_402)
        #expect(response.receipt?.inApp.count == 9)
        #expect(response.latestReceiptInfo?.count == 9)
        #expect(response.latestReceipt == "...")
        let renewal = try #require(response.pendingRenewalInfo?.first)
        #expect(response.pendingRenewalInfo?.count == 1)
        #expect(renewal.autoRenewProductId == "com.revenuecat.annual_39.99.2_week_intro")
        #expect(renewal.originalTransactionId == "1000000692878476")
        #expect(renewal.autoRenewStatus == true)
        let first = try #require(response.receipt?.inApp.first)
        #expect(first.transactionId == "1000000692879214")
        #expect(first.purchaseDate?.milliseconds == 1_594_755_400_000)
        #expect(first.expiresDate?.milliseconds == 1_594_755_700_000)
        #expect(first.isTrialPeriod == false)

        let entries = await log.entries
        #expect(entries.map(\.path) == ["/prod/verifyReceipt", "/sandbox/verifyReceipt"])
        for entry in entries {
            let body = try #require(try JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any])
            #expect(body["receipt-data"] as? String == "cmVjZWlwdA==")
            #expect(body["password"] as? String == "s3cret")
            #expect(body["exclude-old-transactions"] as? Bool == true)
        }
    }

    @Test func aProductionReceiptSentToSandboxComesBackWithoutASecretItWasNotGiven() async throws {
        let log = RequestLog()
        let router = Router()
        router.post("prod/verifyReceipt") { request, _ in
            let count = await log.count("/prod/verifyReceipt")
            _ = try await log.record(request)
            return Response.json(
                count == 0 ? #"{"status":21007}"# : #"{"status":0,"environment":"Production","receipt":{"bundle_id":"b"}}"#)
        }
        router.post("sandbox/verifyReceipt") { request, _ in
            _ = try await log.record(request)
            return Response.json(#"{"status":21008}"#)
        }
        let result = try await LoopbackServer.run(router) { base in try await client(base).verify(receiptData: "eA==") }
        #expect(result.environment == .production)
        #expect(result.response.receipt?.bundleId == "b")
        let entries = await log.entries
        #expect(entries.map(\.path) == ["/prod/verifyReceipt", "/sandbox/verifyReceipt", "/prod/verifyReceipt"])
        let body = try #require(try JSONSerialization.jsonObject(with: Data(entries[0].body)) as? [String: Any])
        #expect(body["password"] == nil)
        #expect(body["exclude-old-transactions"] == nil)
    }

    @Test(arguments: [
        (#"{"status":21006,"receipt":{"transaction_id":"1"}}"#, "expired"),
        (#"{"status":21002}"#, "retryable"),
        (#"{"status":21005}"#, "retryable"),
        (#"{"status":21009}"#, "retryable"),
        (#"{"status":21100}"#, "retryable"),
        (#"{"status":21150,"is-retryable":true}"#, "retryable"),
        (#"{"status":21199,"is-retryable":false}"#, "permanent"),
        (#"{"status":21000}"#, "permanent"),
        (#"{"status":21003}"#, "permanent"),
        (#"{"status":21004}"#, "permanent"),
        (#"{"status":21010}"#, "permanent"),
        (#"{"status":12345}"#, "permanent"),
        ("<html>busy</html>", "retryable"),
    ])
    func everyStatusIsClassed(body: String, expected: String) async throws {
        let router = Router()
        router.post("prod/verifyReceipt") { _, _ in Response.json(body) }
        let outcome: String = try await LoopbackServer.run(router) { base in
            do {
                let result = try await client(base).verify(receiptData: "eA==")
                return result.outcome == .expired ? "expired" : "valid"
            } catch {
                return (error as? AppStoreError)?.isRetryable == true ? "retryable" : "permanent"
            }
        }
        #expect(outcome == expected)
    }

    @Test func serverErrorsAndTimeoutsAreRetryable() async throws {
        let router = Router()
        router.post("prod/verifyReceipt") { _, _ in Response(status: .serviceUnavailable) }
        router.post("slow/verifyReceipt") { _, _ in
            try await Task.sleep(for: .seconds(5))
            return Response.json(#"{"status":0}"#)
        }
        try await LoopbackServer.run(router) { base in
            let unavailable = await #expect(throws: AppStoreError.self) { try await client(base).verify(receiptData: "eA==") }
            #expect(unavailable?.isRetryable == true)
            #expect(unavailable?.httpStatus == 503)

            var configuration = VerifyReceiptClient.Configuration()
            configuration.productionURL = base + "/slow/verifyReceipt"
            configuration.timeout = .milliseconds(200)
            let timedOut = await #expect(throws: AppStoreError.self) {
                try await VerifyReceiptClient(configuration: configuration).verify(receiptData: "eA==")
            }
            #expect(timedOut?.code == .serverUnavailable)
            #expect(timedOut?.isRetryable == true)
        }
    }

    @Test func realResponseBodiesDecode() throws {
        let decoder = JSONDecoder()
        let imdhemy = try decoder.decode(
            VerifyReceiptResponse.self,
            from: Data(try Vectors.bytes("receipts/verifyReceipt-responses/imdhemy-verify_receipt_response-sandbox-redacted.json")))
        #expect(imdhemy.status == 0)
        // PROVENANCE.md says Sandbox; the file itself says Production (the receipt is a sandbox one).
        #expect(imdhemy.environment == "Production")
        #expect(imdhemy.receipt?.receiptType == "ProductionSandbox")
        #expect(imdhemy.receipt?.applicationVersion == "36")
        #expect(imdhemy.receipt?.receiptCreationDate?.milliseconds == 1_604_851_257_000)
        #expect(imdhemy.receipt?.requestDate?.milliseconds == 1_628_954_383_379)
        #expect(imdhemy.receipt?.inApp.count == 42)
        #expect(imdhemy.latestReceiptInfo?.count == 1)
        #expect(imdhemy.latestReceiptInfo?.first?.transactionId == "1000000767477815")
        #expect(imdhemy.latestReceiptInfo?.first?.productId == "one_month_subscription")
        #expect(imdhemy.latestReceipt == "ZmFrZV9kYXRh")
        let pending = try #require(imdhemy.pendingRenewalInfo?.first)
        #expect(pending.expirationIntent == "1")
        #expect(pending.autoRenewProductId == "one_month_subscription")
        #expect(pending.isInBillingRetryPeriod == false)
        #expect(pending.productId == "month_premium")
        #expect(pending.originalTransactionId == "1000000723811158")
        #expect(pending.autoRenewStatus == false)

        // iOS 6 form: the receipt is the transaction.
        let ios6 = try decoder.decode(
            VerifyReceiptResponse.self,
            from: Data(try Vectors.bytes("receipts/verifyReceipt-responses/gopay-verifyReceipt-response-ios6-style-receipt-excerpt.json")))
        #expect(ios6.status == 0)
        #expect(ios6.environment == nil)
        #expect(ios6.receipt?.bundleId == "com.huochai.main")
        #expect(ios6.receipt?.applicationVersion == "10")
        let transaction = try #require(ios6.receipt?.transaction)
        #expect(transaction.transactionId == "1000000859439868")
        #expect(transaction.originalTransactionId == "1000000859439868")
        #expect(transaction.productId == "10002")
        #expect(transaction.purchaseDate?.milliseconds == 1_628_944_097_586)
        #expect(transaction.inAppOwnershipType == .purchased)

        // A hand-edited sample with JSON numbers where Apple sends strings.
        let aporat = try decoder.decode(
            VerifyReceiptResponse.self,
            from: Data(try Vectors.bytes("receipts/verifyReceipt-responses/aporat-inAppPurchaseResponse-sandbox-2014.json")))
        #expect(aporat.status == 0)
        #expect(aporat.receipt?.receiptType == "Sandbox")
        #expect(aporat.receipt?.inApp.count == 2)
        #expect(aporat.latestReceiptInfo?.count == 2)
        #expect(aporat.latestReceiptInfo?.first?.productId == "myapp.1")
        #expect(aporat.latestReceiptInfo?.contains { $0.transactionId == "1000000104232856" } == true)
        #expect(aporat.latestReceiptInfo?.contains { $0.expiresDate?.milliseconds == 1_394_619_485_000 } == true)
        #expect(aporat.pendingRenewalInfo?.count == 1)

        let malformed = try decoder.decode(
            VerifyReceiptResponse.self, from: Data(try Vectors.bytes("receipts/verifyReceipt-responses/aporat-status-21002.json")))
        #expect(malformed.status == 21002)
    }
}
