import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// A publisher whose notifications come in version 1 (or whose V1 copy comes first): a receipt
/// tells no price, so a renewal it is the first to tell is booked at what Apple charged in the
/// customer's storefront (its signed view, read from the App Store Server API), not at the
/// catalog's price in the catalog's currency.
@Suite struct VersionOneNotificationPriceTests {
    @Test(.timeLimit(.minutes(3))) func aRenewalToldByAVersionOneNotificationIsBookedAtApplesPrice() async throws {
        try await APIStack.run("v1-price", worker: true, notify: ["demo"], notifyV1: true, notifyV2: false) { api in
            let customer = "zoe@example.com"
            let bought = try await api.buy(
                "premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false, "storefront": "FRA"])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            try await api.settle()
            try await api.simulator("/simulator/subscriptions/\(original)/renew", "{}")
            try await api.settle()
            let events = try await api.events(customer)
            let purchase = try #require(events.first { $0["type"] as? String == "initial_purchase" }, "\(events)")
            let renewal = try #require(events.first { $0["type"] as? String == "renewal" }, "\(events.map { $0["type"] ?? "?" })")
            #expect(purchase["currency"] as? String == "EUR" && purchase["priceSource"] as? String == "apple", "\(purchase)")
            #expect(renewal["currency"] as? String == "EUR", "\(renewal)")
            #expect(renewal["priceMilliunits"] as? Int == purchase["priceMilliunits"] as? Int, "\(renewal)")
            #expect(renewal["priceSource"] as? String == "apple" && renewal["storefront"] as? String == "FRA", "\(renewal)")
        }
    }
}
