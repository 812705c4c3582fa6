import AppStore
import AppStoreSimulator
import DurationUnits
import Foundation
import Testing
import X509

/// Purchases produce what Apple produces: signed transactions and renewal infos that verify
/// against the simulator's served root, receipts that verify against its receipt root, and
/// the notification for each purchase.
@Suite struct SimulatorPurchaseTests {
    @Test func productsListTheCatalogWithApplesTypeNames() async throws {
        try await SimulatorHarness.run { sim in
            let reply = try await sim.get("/simulator/products")
            #expect(reply.status == 200)
            let products = try #require((try JSONSerialization.jsonObject(with: Data(reply.body))) as? [[String: Any]])
            let types = Set(products.compactMap { $0["type"] as? String })
            #expect(types == ["Consumable", "Non-Consumable", "Non-Renewing Subscription", "Auto-Renewable Subscription"])
            // Every product belongs to one of the catalog's apps, and is named under it.
            let bundles = Set(products.compactMap { $0["bundleId"] as? String })
            #expect(bundles.contains(SimulatorHarness.bundleId))
            #expect(
                products.allSatisfy { product in
                    guard let bundle = product["bundleId"] as? String, let id = product["productId"] as? String else { return false }
                    return id.hasPrefix(bundle + ".")
                })
        }
    }

    @Test func everyProductTypeYieldsVerifiableTransactionsReceiptsAndNotifications() async throws {
        try await SimulatorHarness.run { sim in
            // Verifiers are pointed at the roots the simulator serves, as users would.
            let root = try Certificate(derEncoded: try await sim.get("/simulator/root.cer").body)
            let receiptRoot = try Certificate(derEncoded: try await sim.get("/simulator/receipt-root.cer").body)
            let verifier = SignedDataVerifier(
                configuration: .init(bundleId: SimulatorHarness.bundleId, environment: .sandbox, roots: [root]))
            let receipts = AppReceiptVerifier(configuration: .init(bundleId: SimulatorHarness.bundleId, roots: [receiptRoot]))

            let cases: [(String, ProductType, Int64, String)] = [
                ("com.entitle.demo.credits.100", .consumable, 1980, #""quantity":2"#),
                ("com.entitle.demo.issue.2026.11", .nonConsumable, 4990, #""storefront":"FRA""#),
                ("com.entitle.demo.pass.30days", .nonRenewing, 9990, ""),
                ("com.entitle.demo.premium.monthly", .autoRenewable, 9990, #""useIntroductoryOffer":false"#),
            ]
            for (index, (productId, type, price, extra)) in cases.enumerated() {
                let purchase = try await sim.purchase(productId, extra)
                let transaction = try await verifier.verifyTransaction(purchase.signedTransaction)
                #expect(transaction.transactionId == purchase.transactionId)
                #expect(transaction.productId == productId)
                #expect(transaction.type == type)
                #expect(transaction.price == price)
                #expect(transaction.environment == .sandbox)
                #expect(transaction.transactionReason == .purchase)
                #expect(transaction.signedDate != nil)

                let receipt = try await receipts.verify(base64: purchase.appReceipt)
                #expect(receipt.environment == .sandbox)
                #expect(receipt.inAppPurchases.map(\.transactionId) == [purchase.transactionId])
                #expect(receipt.inAppPurchases.first?.productId == productId)

                let notification = try await sim.lastNotification(count: index + 1)
                let notified = try await verifier.verifyTransaction(try #require(notification.data?.signedTransactionInfo))
                #expect(notified.transactionId == purchase.transactionId)
                if type == .autoRenewable {
                    #expect(notification.notificationType == .subscribed)
                    #expect(notification.subtype == .initialBuy)
                    #expect(notification.data?.status == .active)
                    let renewal = try await verifier.verifyRenewalInfo(try #require(purchase.signedRenewalInfo))
                    #expect(renewal.autoRenewStatus == .on)
                    #expect(renewal.autoRenewProductId == productId)
                    // A sandbox month lasts five minutes.
                    let length = try #require(transaction.expiresDate).milliseconds - (transaction.purchaseDate?.milliseconds ?? 0)
                    #expect(length == 300_000)
                } else {
                    #expect(notification.notificationType == .oneTimeCharge)
                    #expect(transaction.expiresDate == nil)
                }
            }
            #expect(try await sim.get("/simulator/transactions/0").status == 404)
        }
    }

    @Test func introductoryOffersAndOfferCodesAsAppleAppliesThem() async throws {
        try await SimulatorHarness.run { sim in
            let trial = try await sim.verifier.verifyTransaction(
                try await sim.purchase("com.entitle.demo.premium.monthly").signedTransaction)
            #expect(trial.offerType == .introductory)
            #expect(trial.offerDiscountType == .freeTrial)
            #expect(trial.price == 0)
            #expect(trial.offerPeriod == "P1W")
            #expect((trial.expiresDate?.milliseconds ?? 0) - (trial.purchaseDate?.milliseconds ?? 0) == 180_000)

            let upFront = try await sim.verifier.verifyTransaction(
                try await sim.purchase("com.entitle.demo.premium.annual").signedTransaction)
            #expect(upFront.offerDiscountType == .payUpFront)
            #expect(upFront.price == 9990)
            #expect((upFront.expiresDate?.milliseconds ?? 0) - (upFront.purchaseDate?.milliseconds ?? 0) == 900_000)

            let code = try await sim.purchase("com.entitle.demo.premium.monthly", #""offerCode":"WELCOME50""#)
            let coded = try await sim.verifier.verifyTransaction(code.signedTransaction)
            #expect(coded.offerType == .offerCode)
            #expect(coded.offerIdentifier == "WELCOME50")
            #expect(coded.offerDiscountType == .payAsYouGo)
            #expect(coded.price == 4990)
            let renewal = try await sim.verifier.verifyRenewalInfo(try #require(code.signedRenewalInfo))
            #expect(renewal.offerIdentifier == "WELCOME50")
            #expect(renewal.renewalPrice == 4990)

            // Pay as you go: two discounted months, then the regular price; and a lapsed
            // customer coming back resubscribes under the same original id, without the offer.
            let basic = try await sim.purchase("com.entitle.demo.basic.monthly", #""appleAccount":"returning""#)
            _ = try await sim.subscriptionEvent(basic.originalTransactionId, "auto-renew-off")
            try await sim.advance(seconds: 301)
            let again = try await sim.purchase("com.entitle.demo.basic.monthly", #""appleAccount":"returning""#)
            #expect(again.originalTransactionId == basic.originalTransactionId)
            #expect(again.transactionId != basic.transactionId)
            let resubscribed = try await sim.verifier.verifyTransaction(again.signedTransaction)
            #expect(resubscribed.offerType == nil)
            #expect(resubscribed.price == 4990)
            let notification = try await sim.received(try #require(again.notifications.first))
            #expect(notification.notificationType == .subscribed)
            #expect(notification.subtype == .resubscribe)
        }
    }

    @Test func badPurchasesAreRefusedWithAMessage() async throws {
        try await SimulatorHarness.run { sim in
            let cases: [(String, Int, String)] = [
                (#"{"bundleId":"com.entitle.demo","productId":"nope"}"#, 404, "nope"),
                (#"{"bundleId":"com.other","productId":"com.entitle.demo.pass.30days"}"#, 404, "com.other"),
                (#"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.pass.30days","quantity":2}"#, 400, "quantity"),
                (#"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.pass.30days","appAccountToken":"x"}"#, 400, "UUID"),
                (#"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.pass.30days","environment":"Xcode"}"#, 400, "Sandbox"),
                (#"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.premium.monthly","offerCode":"BOGUS"}"#, 400, "BOGUS"),
                (#"{"bundleId":"com.entitle.demo"}"#, 400, "productId is missing"),
                (#"{"bundleId":"#, 400, "malformed"),
            ]
            for (body, status, mentions) in cases {
                let reply = try await sim.post("/simulator/purchases", body)
                #expect(reply.status == status, "\(body)")
                #expect((reply.json["message"] as? String ?? "").contains(mentions), "\(reply.text)")
            }
            _ = try await sim.purchase("com.entitle.demo.issue.2026.11", #""appleAccount":"reader""#)
            let twice = try await sim.post(
                "/simulator/purchases",
                #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.issue.2026.11","appleAccount":"reader"}"#)
            #expect(twice.status == 409)
            // Nothing half-done: only the one good purchase was notified.
            #expect(try await sim.get("/simulator/notifications").decodeArrayCount() == 1)
        }
    }
}

extension SimulatorHarness.Reply {
    func decodeArrayCount() throws -> Int {
        try #require((try JSONSerialization.jsonObject(with: Data(body))) as? [Any]).count
    }
}
