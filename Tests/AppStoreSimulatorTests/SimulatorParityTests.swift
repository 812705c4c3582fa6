import AppStore
import AppStoreSimulator
import Foundation
import Testing

/// What Apple sends today and the simulator sends too (issue 22, point 7), read back through
/// the simulator's HTTP API with the AppStore target's client and verifier.
@Suite struct SimulatorParityTests {
    static let nonConsumable = "com.entitle.demo.issue.2026.11"
    static let monthly = "com.entitle.demo.premium.monthly"

    /// Send Consumption Information V2 (API 1.19) as Apple's pages define it: every product
    /// type; each named 400 error for what breaks its rules; only within the 12 hours after
    /// Apple asked.
    @Test func consumptionInformationV2FollowsApplesRules() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            func send(_ id: String, _ request: ConsumptionRequest) async -> Int? {
                do {
                    try await api.sendConsumptionInformation(transactionId: id, request)
                    return nil
                } catch {
                    return error.apiErrorCode ?? -1
                }
            }
            let delivered = ConsumptionRequest(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false)
            // A non-consumable is a supported type since V2; not before Apple asked.
            let book = try await sim.purchase(Self.nonConsumable)
            #expect(await send(book.transactionId, delivered) == 4_000_000)
            _ = try await sim.transactionEvent(book.transactionId, "consumption-request")
            var unconsented = delivered
            unconsented.customerConsented = false
            #expect(await send(book.transactionId, unconsented) == 4_000_035, "InvalidCustomerConsentedError")
            var unknownStatus = delivered
            unknownStatus.deliveryStatus = DeliveryStatus(rawValue: "LOST")
            #expect(await send(book.transactionId, unknownStatus) == 4_000_036, "InvalidDeliveryStatusError")
            var outOfRange = delivered
            outOfRange.consumptionPercentage = 100_001
            #expect(await send(book.transactionId, outOfRange) == 4_000_000, "ConsumptionPercentageOutOfRangeError")
            var undelivered = ConsumptionRequest(
                customerConsented: true, deliveryStatus: .undeliveredServerOutage, sampleContentProvided: false, consumptionPercentage: 1)
            #expect(await send(book.transactionId, undelivered) == 4_000_000, "UndeliveredConsumptionPercentageNonZeroError")
            undelivered.consumptionPercentage = 0
            #expect(await send(book.transactionId, undelivered) == nil)
            let recorded = try await sim.get("/simulator/transactions/\(book.transactionId)").decode(TransactionSnapshot.self)
            #expect(recorded.consumption == undelivered)
            // Answered once: a second answer finds no request outstanding.
            #expect(await send(book.transactionId, undelivered) == 4_000_000)

            // An auto-renewable subscription takes no percentage (Apple computes it from time).
            let subscription = try await sim.purchase(Self.monthly, #""useIntroductoryOffer":false"#)
            _ = try await sim.transactionEvent(subscription.transactionId, "consumption-request")
            var withPercentage = delivered
            withPercentage.consumptionPercentage = 10_000
            #expect(await send(subscription.transactionId, withPercentage) == 4_000_209)
            #expect(await send(subscription.transactionId, delivered) == nil)

            // Twelve hours after Apple asked, it takes no answer.
            let late = try await sim.purchase("com.entitle.demo.credits.100")
            _ = try await sim.transactionEvent(late.transactionId, "consumption-request")
            try await sim.advance(seconds: 12 * 3600 + 1)
            #expect(await send(late.transactionId, delivered) == 4_000_000)
        }
    }

    @Test func rescindConsentCarriesTheAccountsAppTransactionInAppData() async throws {
        try await SimulatorHarness.run { sim in
            let bought = try await sim.purchase("com.entitle.demo.credits.100", #""appleAccount":"child""#)
            let sent = try await sim.transactionEvent(bought.transactionId, "rescind-consent")
            let payload = try await sim.received(try #require(sent.notifications.first))
            #expect(payload.notificationType == .rescindConsent)
            #expect(payload.subtype == nil)
            // Apple: data, appData, summary and externalPurchaseToken are mutually exclusive.
            #expect(payload.data == nil && payload.summary == nil && payload.externalPurchaseToken == nil)
            let appData = try #require(payload.appData)
            #expect(appData.bundleId == SimulatorHarness.bundleId && appData.environment == .sandbox)
            #expect(payload.payloadBundleId == SimulatorHarness.bundleId)
            let appTransaction = try await sim.verifier.verifyAppTransaction(try #require(appData.signedAppTransactionInfo))
            let transaction = try await sim.verifier.verifyTransaction(bought.signedTransaction)
            #expect(appTransaction.appTransactionId != nil && appTransaction.appTransactionId == transaction.appTransactionId)
            #expect(appTransaction.bundleId == SimulatorHarness.bundleId)
        }
    }

    @Test func externalPurchaseTokensAreCreatedAndRemindedOf() async throws {
        try await SimulatorHarness.run { sim in
            let created = try await sim.post(
                "/simulator/external-purchase-tokens", #"{"bundleId":"\#(SimulatorHarness.bundleId)","subtype":"CREATED"}"#)
            try #require(created.status == 200, "\(created.status): \(created.text)")
            let first = try created.decode(ExternalPurchaseTokenResult.self)
            let announced = try await sim.received(first.notificationUUID)
            #expect(announced.notificationType == .externalPurchaseToken && announced.subtype == .created)
            #expect(announced.data == nil && announced.appData == nil)
            let token = try #require(announced.externalPurchaseToken)
            #expect(token.externalPurchaseId == first.externalPurchaseId && first.externalPurchaseId.hasPrefix("SANDBOX"))
            #expect(token.environment == .sandbox && token.bundleId == SimulatorHarness.bundleId && token.appAppleId != nil)
            #expect(token.tokenType == "SERVICES")
            let createdAt = try #require(token.tokenCreationDate?.milliseconds)
            #expect(try #require(token.tokenExpirationDate?.milliseconds) == createdAt + 30 * 86_400_000)

            let reminder = try await sim.post(
                "/simulator/external-purchase-tokens",
                #"{"bundleId":"\#(SimulatorHarness.bundleId)","subtype":"ACTIVE_TOKEN_REMINDER","externalPurchaseId":"\#(first.externalPurchaseId)","tokenType":"ACQUISITION"}"#
            )
            try #require(reminder.status == 200, "\(reminder.status): \(reminder.text)")
            let reminded = try await sim.received(try reminder.decode(ExternalPurchaseTokenResult.self).notificationUUID)
            #expect(reminded.subtype == .activeTokenReminder)
            #expect(reminded.externalPurchaseToken?.externalPurchaseId == first.externalPurchaseId)
            #expect(reminded.externalPurchaseToken?.tokenType == "ACQUISITION")

            for bad in [
                #"{"bundleId":"\#(SimulatorHarness.bundleId)","subtype":"SUMMARY"}"#,
                #"{"bundleId":"\#(SimulatorHarness.bundleId)","subtype":"CREATED","tokenType":"IN_APP"}"#,
                #"{"bundleId":"\#(SimulatorHarness.bundleId)","subtype":"CREATED","externalPurchaseId":"not-sandbox"}"#,
                #"{"bundleId":"com.example.unknown","subtype":"CREATED"}"#,
            ] {
                let refused = try await sim.post("/simulator/external-purchase-tokens", bad)
                #expect((400..<500).contains(refused.status), "\(bad): \(refused.status)")
            }
        }
    }

    @Test func renewalInfoCarriesApplesNewerFields() async throws {
        try await SimulatorHarness.run { sim in
            let bought = try await sim.purchase(Self.monthly, #""offerCode":"WELCOME50""#)
            let transaction = try await sim.verifier.verifyTransaction(bought.signedTransaction)
            let info = try await sim.verifier.verifyRenewalInfo(try #require(bought.signedRenewalInfo))
            #expect(info.renewalPrice == 4_990 && info.currency == "USD")
            #expect(info.offerType == .offerCode && info.offerDiscountType == .payAsYouGo && info.offerIdentifier == "WELCOME50")
            #expect(info.offerPeriod == "P1M")
            #expect(info.appTransactionId != nil && info.appTransactionId == transaction.appTransactionId)
            #expect(info.eligibleWinBackOfferIds == nil, "a subscriber is not offered a win-back")

            _ = try await sim.subscriptionEvent(bought.originalTransactionId, "auto-renew-off")
            try await sim.advance(seconds: 301)
            let ended = try await sim.get("/simulator/subscriptions/\(bought.originalTransactionId)").decode(SubscriptionSnapshot.self)
            #expect(ended.status == .expired)
            let lapsed = try await sim.verifier.verifyRenewalInfo(ended.signedRenewalInfo)
            #expect(lapsed.eligibleWinBackOfferIds == ["premium-winback-3months", "premium-winback-1month"])
        }
    }

    @Test func aOneTimeProductBoughtWithAnOfferCodeSaysOneTime() async throws {
        try await SimulatorHarness.run { sim in
            let bought = try await sim.purchase("com.entitle.demo.credits.100", #""offerCode":"CREDITS-HALF","quantity":2"#)
            let transaction = try await sim.verifier.verifyTransaction(bought.signedTransaction)
            #expect(transaction.offerType == .offerCode && transaction.offerIdentifier == "CREDITS-HALF")
            #expect(transaction.offerDiscountType == .oneTime)
            #expect(transaction.price == 980 && transaction.currency == "USD")
            let plain = try await sim.verifier.verifyTransaction(try await sim.purchase("com.entitle.demo.credits.100").signedTransaction)
            #expect(plain.offerDiscountType == nil && plain.price == 990)
            let unknown = try await sim.post(
                "/simulator/purchases",
                #"{"bundleId":"\#(SimulatorHarness.bundleId)","productId":"com.entitle.demo.credits.100","offerCode":"NOPE"}"#)
            #expect(unknown.status == 400)
        }
    }
}
