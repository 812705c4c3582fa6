import AppStore
import Crypto
import DurationUnits
import Foundation
import HTTPTestSupport
import Hummingbird
import Testing

/// The App Store Server API client against a real HTTP server on loopback playing Apple.
@Suite struct AppStoreServerAPIClientTests {
    static let keyPEM = (try? Vectors.text("appstore-library/swift/certs/testSigningKey.p8")) ?? ""

    /// 30 s unless a test is about the timeout: the whole suite on two cores once kept a
    /// loopback answer waiting past 10.
    func client(
        _ base: String, environment: AppStoreEnvironment = .production, timeout: Duration = .seconds(30)
    ) throws
        -> AppStoreServerAPIClient
    {
        var configuration = AppStoreServerAPIClient.Configuration(
            keyId: "KEY123", issuerId: "issuer-uuid", bundleId: "com.example", environment: environment)
        configuration.productionURL = base + "/production"
        configuration.sandboxURL = base + "/sandbox"
        configuration.timeout = timeout
        return try AppStoreServerAPIClient(configuration: configuration, privateKeyPEM: Self.keyPEM)
    }

    func model(_ name: String) throws -> [UInt8] { try Vectors.bytes("appstore-library/swift/models/\(name).json") }

    @Test func requestsCarryAValidES256TokenForAppleAudience() async throws {
        let log = RequestLog()
        let router = Router()
        let body = try model("transactionInfoResponse")
        router.get("production/inApps/v1/transactions/:id") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: body)
        }
        let response = try await LoopbackServer.run(router) { base in
            try await client(base).getTransactionInfo(transactionId: "1234")
        }
        #expect(response.signedTransactionInfo == "signed_transaction_info_value")
        let entry = try #require(await log.entries.first)
        #expect(entry.path == "/production/inApps/v1/transactions/1234")
        let token = try #require(entry.authorization?.split(separator: " ").last.map(String.init))
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try json(parts[0])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY123")
        #expect(header["typ"] as? String == "JWT")
        let claims = try json(parts[1])
        #expect(claims["aud"] as? String == "appstoreconnect-v1")
        #expect(claims["iss"] as? String == "issuer-uuid")
        #expect(claims["bid"] as? String == "com.example")
        let issuedAt = try #require(claims["iat"] as? Int)
        let expires = try #require(claims["exp"] as? Int)
        #expect(expires > issuedAt && expires - issuedAt <= 3600)
        #expect(abs(Double(issuedAt) - Date().timeIntervalSince1970) < 120)
        let key = try P256.Signing.PrivateKey(pemRepresentation: Self.keyPEM).publicKey
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(base64URL(parts[2])))
        #expect(key.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
    }

    @Test func transactionHistoryFollowsRevisionThroughEveryPage() async throws {
        let log = RequestLog()
        let router = Router()
        router.get("production/inApps/v2/history/:id") { request, _ in
            let entry = try await log.record(request)
            let page: String
            switch entry.query {
            case "":
                page =
                    #"{"revision":"r1","hasMore":true,"bundleId":"com.example","environment":"Production","signedTransactions":["t1","t2"]}"#
            case "revision=r1": page = #"{"revision":"r2","hasMore":true,"signedTransactions":["t3"]}"#
            case "revision=r2": page = #"{"revision":"r3","hasMore":false,"signedTransactions":["t4"]}"#
            default: return Response.json(#"{"errorCode":4000005,"errorMessage":"Invalid revision."}"#, status: .badRequest)
            }
            return Response.json(page)
        }
        let all = try await LoopbackServer.run(router) { base in
            try await client(base).getAllTransactionHistory(transactionId: "42")
        }
        #expect(all == ["t1", "t2", "t3", "t4"])
        #expect(await log.entries.map(\.query) == ["", "revision=r1", "revision=r2"])
    }

    @Test func notFoundInProductionAndPreReleaseUnauthorizedAreRetriedAgainstSandbox() async throws {
        let log = RequestLog()
        let router = Router()
        let body = try model("transactionInfoResponse")
        router.get("production/inApps/v1/transactions/:id") { request, context in
            _ = try await log.record(request)
            if context.parameters.get("id") == "401" { return Response(status: .unauthorized) }
            return Response.json(#"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#, status: .notFound)
        }
        router.get("sandbox/inApps/v1/transactions/:id") { request, context in
            _ = try await log.record(request)
            if context.parameters.get("id") == "missing" {
                return Response.json(#"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#, status: .notFound)
            }
            return Response.json(bytes: body)
        }
        try await LoopbackServer.run(router) { base in
            let fromSandbox = try await client(base).getTransactionInfo(transactionId: "7")
            #expect(fromSandbox.signedTransactionInfo == "signed_transaction_info_value")
            _ = try await client(base).getTransactionInfo(transactionId: "401")
            let missing = await #expect(throws: AppStoreError.self) {
                try await client(base).getTransactionInfo(transactionId: "missing")
            }
            #expect(missing?.apiErrorCode == 4_040_010)
            #expect(missing?.isRetryable == false)
            // A sandbox-configured client never goes to production.
            let sandboxOnly = await #expect(throws: AppStoreError.self) {
                try await client(base, environment: .sandbox).getTransactionInfo(transactionId: "missing")
            }
            #expect(sandboxOnly?.httpStatus == 404)
        }
        #expect(
            await log.entries.map(\.path) == [
                "/production/inApps/v1/transactions/7", "/sandbox/inApps/v1/transactions/7",
                "/production/inApps/v1/transactions/401", "/sandbox/inApps/v1/transactions/401",
                "/production/inApps/v1/transactions/missing", "/sandbox/inApps/v1/transactions/missing",
                "/sandbox/inApps/v1/transactions/missing",
            ])
    }

    @Test func failuresAreClassedAndRateLimitsCarryRetryAfter() async throws {
        let router = Router()
        let tooMany = try model("apiTooManyRequestsException")
        let unknown = try model("apiException")
        router.get("production/inApps/v1/subscriptions/:id") { _, context in
            switch context.parameters.get("id") {
            case "429":
                return Response(
                    status: .tooManyRequests, headers: [.retryAfter: "1699999999000"],
                    body: ResponseBody(byteBuffer: ByteBuffer(bytes: tooMany)))
            case "500": return Response.json(bytes: unknown, status: .internalServerError)
            case "retryable":
                return Response.json(#"{"errorCode":4040002,"errorMessage":"Account not found. Please try again."}"#, status: .notFound)
            case "slow":
                try await Task.sleep(for: .seconds(5))
                return Response.json("{}")
            default: return Response.json(#"{"errorCode":4000006,"errorMessage":"Invalid transaction id."}"#, status: .badRequest)
            }
        }
        try await LoopbackServer.run(router) { base in
            let api = try client(base, timeout: .seconds(2))
            let limited = await #expect(throws: AppStoreError.self) { try await api.getAllSubscriptionStatuses(transactionId: "429") }
            #expect(limited?.code == .rateLimited)
            #expect(limited?.isRetryable == true)
            #expect(limited?.apiErrorCode == 4_290_000)
            #expect(limited?.retryAfter == Date(timeIntervalSince1970: 1_699_999_999))
            let serverError = await #expect(throws: AppStoreError.self) { try await api.getAllSubscriptionStatuses(transactionId: "500") }
            #expect(serverError?.isRetryable == true)
            #expect(serverError?.apiErrorCode == 5_000_000)
            let retryable = await #expect(throws: AppStoreError.self) {
                try await api.getAllSubscriptionStatuses(transactionId: "retryable")
            }
            #expect(retryable?.isRetryable == true)
            let invalid = await #expect(throws: AppStoreError.self) { try await api.getAllSubscriptionStatuses(transactionId: "bad") }
            #expect(invalid?.code == .requestRejected)
            #expect(invalid?.isRetryable == false)
            #expect(invalid?.apiErrorCode == 4_000_006)
            let slow = await #expect(throws: AppStoreError.self) { try await api.getAllSubscriptionStatuses(transactionId: "slow") }
            #expect(slow?.code == .serverUnavailable)
            #expect(slow?.isRetryable == true)
            // Ids that would change the path never leave the process.
            for id in [
                "../../x", "", ".", "..", "a/b", "a%2Fb", "1 2", "1?x", "1#x", "é1", "\u{212A}", "1\u{0}",
                String(repeating: "7", count: 129),
            ] {
                let refused = await #expect(throws: AppStoreError.self) { try await api.getTransactionInfo(transactionId: id) }
                #expect(refused?.code == .invalidFormat, "\(id)")
            }
            // Every character Apple's ids may hold, and the longest id, go out (whatever the server answers).
            for id in ["a-b_c.D9", String(repeating: "7", count: 128)] {
                do throws(AppStoreError) {
                    _ = try await api.getTransactionInfo(transactionId: id)
                } catch {
                    #expect(error.code != .invalidFormat, "\(id)")
                }
            }
        }
    }

    @Test func everyEndpointUsesApplesMethodPathAndBody() async throws {
        let log = RequestLog()
        let router = Router()
        let statuses = try model("getAllSubscriptionStatusesResponse")
        let refunds = try model("getRefundHistoryResponse")
        let notifications = try model("getNotificationHistoryResponse")
        let lookup = try model("lookupOrderIdResponse")
        let extend = try model("extendSubscriptionRenewalDateResponse")
        let test = try model("requestTestNotificationResponse")
        router.get("sandbox/inApps/v1/subscriptions/:id") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: statuses)
        }
        router.get("sandbox/inApps/v2/refund/lookup/:id") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: refunds)
        }
        router.post("sandbox/inApps/v1/notifications/history") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: notifications)
        }
        router.get("sandbox/inApps/v1/lookup/:id") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: lookup)
        }
        router.put("sandbox/inApps/v2/transactions/consumption/:id") { request, _ in
            _ = try await log.record(request)
            return Response(status: .accepted)
        }
        router.put("sandbox/inApps/v1/subscriptions/extend/:id") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: extend)
        }
        router.post("sandbox/inApps/v1/notifications/test") { request, _ in
            _ = try await log.record(request)
            return Response.json(bytes: test)
        }
        try await LoopbackServer.run(router) { base in
            let api = try client(base, environment: .sandbox)
            let status = try await api.getAllSubscriptionStatuses(transactionId: "4321", status: [.active, .expired])
            #expect(status.environment == .localTesting)
            #expect(status.bundleId == "com.example")
            #expect(status.appAppleId == 5_454_545)
            let groups = try #require(status.data)
            #expect(groups.map(\.subscriptionGroupIdentifier) == ["sub_group_one", "sub_group_two"])
            #expect(groups[0].lastTransactions?.map(\.status) == [.active, .revoked])
            #expect(groups[0].lastTransactions?.map(\.originalTransactionId) == ["3749183", "5314314134"])
            #expect(groups[0].lastTransactions?.first?.signedTransactionInfo == "signed_transaction_one")
            #expect(groups[0].lastTransactions?.first?.signedRenewalInfo == "signed_renewal_one")
            #expect(groups[1].lastTransactions?.first?.status == .expired)
            #expect(groups[1].lastTransactions?.first?.originalTransactionId == "3413453")

            let refund = try await api.getRefundHistory(transactionId: "555", revision: "rev")
            #expect(refund.signedTransactions == ["signed_transaction_one", "signed_transaction_two"])
            #expect(refund.revision == "revision_output")
            #expect(refund.hasMore == true)

            var request = NotificationHistoryRequest(
                startDate: AppleTimestamp(milliseconds: 1_698_148_900_000), endDate: AppleTimestamp(milliseconds: 1_698_148_950_000))
            request.notificationType = .subscribed
            request.onlyFailures = true
            let history = try await api.getNotificationHistory(request, paginationToken: "a7a4")
            #expect(history.paginationToken == "57715481-805a-4283-8499-1c19b5d6b20a")
            #expect(history.hasMore == true)
            let items = try #require(history.notificationHistory)
            #expect(items.map(\.signedPayload) == ["signed_payload_one", "signed_payload_two"])
            #expect(items[0].sendAttempts?.map(\.sendAttemptResult) == [.noResponse, .success])
            #expect(items[0].sendAttempts?.map { $0.attemptDate?.milliseconds } == [1_698_148_900_000, 1_698_148_950_000])
            #expect(items[1].sendAttempts?.map(\.sendAttemptResult) == [.circularRedirect])

            let order = try await api.lookUpOrderId("W002182")
            #expect(order.status == .invalid)
            #expect(order.signedTransactions == ["signed_transaction_one", "signed_transaction_two"])

            try await api.sendConsumptionInformation(
                transactionId: "49571273",
                ConsumptionRequest(
                    customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 67_932,
                    refundPreference: .grantProrated))

            let extended = try await api.extendSubscriptionRenewalDate(
                originalTransactionId: "2312412",
                ExtendRenewalDateRequest(extendByDays: 45, extendReasonCode: 1, requestIdentifier: "fdf964a4-233b-486c-aac1-97d8d52688ac"))
            #expect(extended.originalTransactionId == "2312412")
            #expect(extended.webOrderLineItemId == "9993")
            #expect(extended.success == true)
            #expect(extended.effectiveDate?.milliseconds == 1_698_148_900_000)

            let token = try await api.requestTestNotification()
            #expect(token.testNotificationToken == "ce3af791-365e-4c60-841b-1674b43c1609")
        }
        let entries = await log.entries
        #expect(
            entries.map { "\($0.method) \($0.path)" } == [
                "GET /sandbox/inApps/v1/subscriptions/4321", "GET /sandbox/inApps/v2/refund/lookup/555",
                "POST /sandbox/inApps/v1/notifications/history", "GET /sandbox/inApps/v1/lookup/W002182",
                "PUT /sandbox/inApps/v2/transactions/consumption/49571273", "PUT /sandbox/inApps/v1/subscriptions/extend/2312412",
                "POST /sandbox/inApps/v1/notifications/test",
            ])
        #expect(entries[0].query == "status=1&status=2")
        #expect(entries[1].query == "revision=rev")
        #expect(entries[2].query == "paginationToken=a7a4")
        let historyBody = try #require(try JSONSerialization.jsonObject(with: Data(entries[2].body)) as? [String: Any])
        #expect(historyBody["startDate"] as? Int == 1_698_148_900_000)
        #expect(historyBody["notificationType"] as? String == "SUBSCRIBED")
        #expect(historyBody["onlyFailures"] as? Bool == true)
        let consumption = try #require(try JSONSerialization.jsonObject(with: Data(entries[4].body)) as? [String: Any])
        // Apple's V2 body (API 1.19): five fields, Apple's names and string values.
        #expect(
            Set(consumption.keys) == [
                "customerConsented", "deliveryStatus", "sampleContentProvided", "consumptionPercentage", "refundPreference",
            ])
        #expect(consumption["customerConsented"] as? Bool == true)
        #expect(consumption["deliveryStatus"] as? String == "DELIVERED")
        #expect(consumption["sampleContentProvided"] as? Bool == false)
        #expect(consumption["consumptionPercentage"] as? Int == 67_932)
        #expect(consumption["refundPreference"] as? String == "GRANT_PRORATED")
        let extendBody = try #require(try JSONSerialization.jsonObject(with: Data(entries[5].body)) as? [String: Any])
        #expect(extendBody["extendByDays"] as? Int == 45)
    }

    @Test func historyModelsDecodeLenientlyButRefuseMalformedIds() throws {
        let decoder = JSONDecoder()
        let history = try decoder.decode(HistoryResponse.self, from: Data(try model("transactionHistoryResponse")))
        #expect(history.revision == "revision_output")
        #expect(history.hasMore == true)
        #expect(history.bundleId == "com.example")
        #expect(history.appAppleId == 323_232)
        #expect(history.environment == .localTesting)
        #expect(history.signedTransactions == ["signed_transaction_value", "signed_transaction_value2"])
        let odd = try decoder.decode(HistoryResponse.self, from: Data(try model("transactionHistoryResponseWithMalformedEnvironment")))
        #expect(odd.environment?.rawValue == "LocalTestingxxx")
        #expect(odd.environment?.isKnown == false)
        #expect(throws: DecodingError.self) {
            try decoder.decode(HistoryResponse.self, from: Data(try model("transactionHistoryResponseWithMalformedAppAppleId")))
        }
        let gopay = try decoder.decode(
            HistoryResponse.self, from: Data(try Vectors.bytes("api-responses/gopay-get-transaction-history-response-sandbox.json")))
        #expect(gopay.appAppleId == 0)
        #expect(gopay.bundleId == "Com.VoiceRecording.Telephone")
        #expect(gopay.revision == "1666746460000_2000000185649494")
        #expect(gopay.signedTransactions?.count == 1)
        let statuses = try decoder.decode(
            StatusResponse.self, from: Data(try Vectors.bytes("api-responses/gopay-get-all-subscription-statuses-response-sandbox.json")))
        #expect(statuses.data?.first?.subscriptionGroupIdentifier == "21024612")
        #expect(statuses.data?.first?.lastTransactions?.first?.status == .expired)
        #expect(statuses.data?.first?.lastTransactions?.first?.originalTransactionId == "2000000184445477")
        let order = try decoder.decode(
            OrderLookupResponse.self, from: Data(try Vectors.bytes("api-responses/gopay-look-up-order-id-response.json")))
        #expect(order.status == .valid)
        #expect(order.signedTransactions?.count == 1)
        let errors = try [
            "invalidAppAccountTokenUUIDError", "familyTransactionNotSupportedError", "transactionIdNotOriginalTransactionId",
            "apiUnknownError",
        ]
        .map { try decoder.decode(APIErrorResponse.self, from: Data(try model($0))).errorCode }
        #expect(errors == [4_000_183, 4_000_185, 4_000_187, 9_990_000])
    }

    @Test func realSignedDataInsideAPIResponsesVerifies() async throws {
        let decoder = JSONDecoder()
        let statuses = try decoder.decode(
            StatusResponse.self, from: Data(try Vectors.bytes("api-responses/gopay-get-all-subscription-statuses-response-sandbox.json")))
        let item = try #require(statuses.data?.first?.lastTransactions?.first)
        let verifier = SignedDataVerifier(configuration: .init(bundleId: "Com.VoiceRecording.Telephone"))
        let transaction = try await verifier.verifyTransaction(try #require(item.signedTransactionInfo))
        #expect(transaction.transactionId == "2000000191896422")
        let renewal = try await verifier.verifyRenewalInfo(try #require(item.signedRenewalInfo))
        #expect(renewal.autoRenewStatus == .off)
    }

    @Test func aBadKeyIsAConfigurationError() throws {
        let error = #expect(throws: AppStoreError.self) {
            try AppStoreServerAPIClient(
                configuration: .init(keyId: "k", issuerId: "i", bundleId: "b"),
                privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----")
        }
        #expect(error?.code == .invalidConfiguration)
    }

    func json(_ segment: String) throws -> [String: Any] {
        let data = try #require(base64URL(segment))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    func base64URL(_ text: String) -> Data? {
        var text = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return Data(base64Encoded: text)
    }
}
