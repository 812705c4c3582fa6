import AppStore
import AppStoreSimulator
import Crypto
import Foundation
import Testing

/// The AppStore target's clients against the simulator's Apple endpoints: JWT auth,
/// scoping, pagination, Apple's error bodies, faults, and verifyReceipt's environments.
@Suite struct SimulatorAppleEndpointTests {
    @Test func serverAPIReadsTransactionsHistoryStatusesAndOrders() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            // 21 purchases by one account: history takes two pages of Apple's 20.
            var purchases: [PurchaseResult] = []
            for _ in 0..<20 { purchases.append(try await sim.purchase("com.entitle.demo.credits.100", #""appleAccount":"caller""#)) }
            purchases.append(try await sim.purchase("com.entitle.demo.premium.monthly", #""appleAccount":"caller""#))

            let info = try await api.getTransactionInfo(transactionId: purchases[3].transactionId)
            #expect(
                try await sim.verifier.verifyTransaction(try #require(info.signedTransactionInfo)).transactionId
                    == purchases[3].transactionId)

            let first = try await api.getTransactionHistory(transactionId: purchases[0].transactionId)
            #expect(first.signedTransactions?.count == 20)
            #expect(first.hasMore == true)
            let all = try await api.getAllTransactionHistory(transactionId: purchases[0].transactionId)
            var ids: [String] = []
            for jws in all { ids.append(try #require(try await sim.verifier.verifyTransaction(jws).transactionId)) }
            #expect(ids == purchases.map(\.transactionId))

            let statuses = try await api.getAllSubscriptionStatuses(transactionId: purchases[0].transactionId)
            #expect(statuses.environment == .sandbox)
            #expect(statuses.data?.first?.subscriptionGroupIdentifier == "21000001")
            #expect(statuses.data?.first?.lastTransactions?.first?.originalTransactionId == purchases[20].originalTransactionId)

            let order = try await api.lookUpOrderId(purchases[5].orderId)
            #expect(order.status == .valid)
            #expect(order.signedTransactions?.count == 1)
            #expect(try await api.lookUpOrderId("NOSUCHORDER").status == .invalid)

            // Another customer's history does not leak in.
            let stranger = try await sim.purchase("com.entitle.demo.credits.100")
            #expect(try await api.getTransactionHistory(transactionId: stranger.transactionId).signedTransactions?.count == 1)
        }
    }

    @Test func tokensAreCheckedAndErrorsAreApples() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase("com.entitle.demo.pass.30days")
            // A key the simulator never saw: 401, which the client reports as configuration.
            var configuration = AppStoreServerAPIClient.Configuration(keyId: "UNKNOWN", issuerId: "i", bundleId: SimulatorHarness.bundleId)
            configuration.environment = .sandbox
            configuration.sandboxURL = sim.baseURL + "/sandbox"
            let stranger = try AppStoreServerAPIClient(
                configuration: configuration, privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
            let refused = await #expect(throws: AppStoreError.self) {
                try await stranger.getTransactionInfo(transactionId: purchase.transactionId)
            }
            #expect(refused?.httpStatus == 401)

            // Hand-made tokens: expired, living too long, wrong audience, tampered.
            let key = P256.Signing.PrivateKey()
            let registration =
                #"{"keyId":"HANDMADE","issuerId":"iss","bundleId":"com.entitle.demo","publicKey":"\#(key.publicKey.pemRepresentation.replacingOccurrences(of: "\n", with: "\\n"))"}"#
            #expect(try await sim.post("/simulator/keys", registration).status == 204)
            #expect(try await sim.post("/simulator/keys", #"{"keyId":"K","issuerId":"i","bundleId":"b","publicKey":"nope"}"#).status == 400)
            let now = Int(Date().timeIntervalSince1970)
            func token(_ claims: [String: Any], tamper: Bool = false) throws -> String {
                func encode(_ object: [String: Any]) throws -> String {
                    Data(try JSONSerialization.data(withJSONObject: object)).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                        .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                }
                let input = try encode(["alg": "ES256", "kid": "HANDMADE", "typ": "JWT"]) + "." + (try encode(claims))
                let signature = try key.signature(for: Data(input.utf8)).rawRepresentation.base64EncodedString()
                    .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
                        of: "=", with: "")
                return input + "." + (tamper ? String(signature.reversed()) : signature)
            }
            let good: [String: Any] = ["iss": "iss", "aud": "appstoreconnect-v1", "bid": "com.entitle.demo", "iat": now, "exp": now + 600]
            let path = "/sandbox/inApps/v1/transactions/\(purchase.transactionId)"
            func status(_ token: String) async throws -> Int {
                try await sim.request(.GET, path, headers: [("Authorization", "Bearer " + token)]).status
            }
            #expect(try await status(try token(good)) == 200)
            #expect(try await status(try token(good.merging(["exp": now - 10]) { $1 })) == 401)
            #expect(try await status(try token(good.merging(["exp": now + 7200]) { $1 })) == 401)
            #expect(try await status(try token(good.merging(["aud": "other"]) { $1 })) == 401)
            #expect(try await status(try token(good.merging(["bid": "com.other"]) { $1 })) == 401)
            #expect(try await status(try token(good, tamper: true)) == 401)
            #expect(try await sim.get(path).status == 401)

            // Apple's error bodies.
            let api = try await sim.apiClient()
            let invalid = await #expect(throws: AppStoreError.self) { try await api.getTransactionInfo(transactionId: "12ab") }
            #expect(invalid?.apiErrorCode == 4_000_006)
            let missing = await #expect(throws: AppStoreError.self) { try await api.getTransactionInfo(transactionId: "123") }
            #expect(missing?.apiErrorCode == 4_040_010)
            #expect(missing?.isRetryable == false)
        }
    }

    @Test func productionFallsBackToSandboxOn4040010() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase("com.entitle.demo.pass.30days")
            let withFallback = try await sim.apiClient(environment: .production)
            let info = try await withFallback.getTransactionInfo(transactionId: purchase.transactionId)
            #expect(info.signedTransactionInfo != nil)
            let strict = try await sim.apiClient(environment: .production, fallback: false)
            let error = await #expect(throws: AppStoreError.self) {
                try await strict.getTransactionInfo(transactionId: purchase.transactionId)
            }
            #expect(error?.apiErrorCode == 4_040_010)

            // And production purchases are found in production only.
            let live = try await sim.purchase("com.entitle.demo.pass.30days", #""environment":"Production""#)
            #expect(try await strict.getTransactionInfo(transactionId: live.transactionId).signedTransactionInfo != nil)
            let sandbox = try await sim.apiClient(environment: .sandbox)
            await #expect(throws: AppStoreError.self) { try await sandbox.getTransactionInfo(transactionId: live.transactionId) }
        }
    }

    @Test func injectedFaultsAnswerAsAppleDoes() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase("com.entitle.demo.pass.30days")
            let api = try await sim.apiClient()
            #expect(try await sim.post("/simulator/faults", #"{"target":"serverAPI","status":429,"retryAfterSeconds":30}"#).status == 204)
            let limited = await #expect(throws: AppStoreError.self) {
                try await api.getTransactionInfo(transactionId: purchase.transactionId)
            }
            #expect(limited?.code == .rateLimited)
            #expect(limited?.apiErrorCode == 4_290_000)
            let wait = try #require(limited?.retryAfter).timeIntervalSinceNow
            #expect(wait > 25 && wait <= 31)
            // One failure was asked for; the next call succeeds.
            #expect(try await api.getTransactionInfo(transactionId: purchase.transactionId).signedTransactionInfo != nil)

            #expect(
                try await sim.post("/simulator/faults", #"{"target":"serverAPI","status":503,"count":2,"pathContains":"/history/"}"#).status
                    == 204)
            #expect(try await api.getTransactionInfo(transactionId: purchase.transactionId).signedTransactionInfo != nil)
            for _ in 0..<2 {
                let unavailable = await #expect(throws: AppStoreError.self) {
                    try await api.getTransactionHistory(transactionId: purchase.transactionId)
                }
                #expect(unavailable?.isRetryable == true)
            }
            #expect(try await api.getTransactionHistory(transactionId: purchase.transactionId).signedTransactions?.count == 1)

            #expect(try await sim.post("/simulator/faults", #"{"target":"verifyReceipt","receiptStatus":21005}"#).status == 204)
            let busy = await #expect(throws: AppStoreError.self) {
                try await sim.verifyReceiptClient().verify(receiptData: purchase.appReceipt)
            }
            #expect(busy?.isRetryable == true)
            #expect(try await sim.post("/simulator/faults", #"{"target":"serverAPI"}"#).status == 400)
        }
    }

    @Test func verifyReceiptEnvironmentsSecretAndLatestInfo() async throws {
        try await SimulatorHarness.run { sim in
            let subscription = try await sim.purchase("com.entitle.demo.premium.monthly", #""appleAccount":"legacy""#)
            _ = try await sim.purchase("com.entitle.demo.issue.2026.11", #""appleAccount":"legacy""#)
            try await sim.advance(seconds: 181)  // the free week ends and the first paid month begins

            // The client starts at production, gets 21007, and asks sandbox.
            let result = try await sim.verifyReceiptClient().verify(receiptData: subscription.appReceipt)
            #expect(result.outcome == .valid)
            #expect(result.environment == .sandbox)
            let latest = try #require(result.response.latestReceiptInfo)
            #expect(latest.count == 3)
            #expect(latest.first?.productId == "com.entitle.demo.premium.monthly")
            #expect(latest.first?.originalTransactionId == subscription.originalTransactionId)
            #expect(latest.last?.isTrialPeriod == true)
            let pending = try #require(result.response.pendingRenewalInfo?.first)
            #expect(pending.autoRenewStatus == true)
            #expect(pending.originalTransactionId == subscription.originalTransactionId)
            let fresh = try await AppReceiptVerifier(configuration: .init(roots: [sim.server.store.receiptSigning.root]))
                .verify(base64: try #require(result.response.latestReceipt))
            #expect(fresh.inAppPurchases.count == 3)

            var excluding = sim.verifyReceiptClient()
            excluding = VerifyReceiptClient(
                configuration: {
                    var c = excluding.configuration; c.excludeOldTransactions = true; return c
                }())
            #expect(try await excluding.verify(receiptData: subscription.appReceipt).response.latestReceiptInfo?.count == 2)

            let wrongSecret = await #expect(throws: AppStoreError.self) {
                try await sim.verifyReceiptClient(secret: "wrong").verify(receiptData: subscription.appReceipt)
            }
            #expect(wrongSecret?.apiErrorCode == 21004)
            await #expect(throws: AppStoreError.self) {
                try await sim.verifyReceiptClient(secret: nil).verify(receiptData: subscription.appReceipt)
            }

            // Production receipts sent to sandbox get 21008; tampered receipts are refused.
            let live = try await sim.purchase("com.entitle.demo.pass.30days", #""environment":"Production""#)
            let wrongHost = try await sim.post("/sandbox/verifyReceipt", #"{"receipt-data":"\#(live.appReceipt)"}"#)
            #expect(wrongHost.json["status"] as? Int == 21008)
            #expect(try await sim.verifyReceiptClient().verify(receiptData: live.appReceipt).environment == .production)
            var bytes = try #require(Data(base64Encoded: live.appReceipt))
            bytes[bytes.count / 3] ^= 0x01
            let tampered = try await sim.post("/verifyReceipt", #"{"receipt-data":"\#(bytes.base64EncodedString())"}"#)
            #expect([21002, 21003].contains(tampered.json["status"] as? Int ?? 0))
            #expect(try await sim.post("/verifyReceipt", "not json").json["status"] as? Int == 21002)
        }
    }
}
