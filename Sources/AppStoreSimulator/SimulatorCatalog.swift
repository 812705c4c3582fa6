import AppStore
import Foundation

/// The apps and products the simulator sells, as a JSON file (`Config/simulator-catalog.json`
/// is the demo): every product type, subscription groups with levels, introductory offers,
/// offer codes, and prices per storefront.
public struct SimulatorCatalog: Sendable, Codable, Hashable {
    /// An app on the simulated App Store.
    public struct App: Sendable, Codable, Hashable {
        public var bundleId: String
        public var appAppleId: Int64
        public var bundleVersion: String?
        /// The app-specific shared secret verifyReceipt expects for subscriptions.
        public var sharedSecret: String?
        /// Billing grace period in days (Apple offers 3, 16 or 28); none when absent.
        public var gracePeriodDays: Int?
    }

    public struct SubscriptionGroup: Sendable, Codable, Hashable {
        public var id: String
        public var referenceName: String?
    }

    /// A price in one storefront (ISO 3166 alpha-3) and currency (ISO 4217).
    public struct Price: Sendable, Codable, Hashable {
        public var storefront: String
        public var price: Double
        public var currency: String

        /// Apple's transactions carry prices in milliunits.
        public var milliunits: Int64 { Int64((price * 1000).rounded()) }
    }

    /// An introductory offer or an offer code.
    public struct Offer: Sendable, Codable, Hashable {
        /// For offer codes: the code customers redeem (and the transaction's `offerIdentifier`).
        public var id: String?
        /// `FREE_TRIAL`, `PAY_AS_YOU_GO` or `PAY_UP_FRONT`.
        public var type: OfferDiscountType
        /// One offer period: the free or discounted span (pay up front), or the discounted
        /// renewal period (pay as you go).
        public var period: SubscriptionPeriod
        /// How many periods the offer lasts (pay as you go); 1 otherwise.
        public var periodCount: Int?
        /// The discounted prices; none for free trials.
        public var prices: [Price]?
    }

    /// An offer code for a consumable, non-consumable or non-renewing subscription (API
    /// 1.18): its transaction says `offerType` 3, `offerDiscountType` `ONE_TIME`.
    public struct OneTimeOfferCode: Sendable, Codable, Hashable {
        /// The code customers redeem (the transaction's `offerIdentifier`).
        public var id: String
        /// The discounted prices, per item.
        public var prices: [Price]
    }

    public struct Product: Sendable, Codable, Hashable {
        public var productId: String
        public var bundleId: String
        /// As Apple names it: `Consumable`, `Non-Consumable`, `Non-Renewing Subscription`,
        /// `Auto-Renewable Subscription`.
        public var type: ProductType
        public var referenceName: String?
        public var prices: [Price]
        /// Auto-renewable subscriptions: the group's id, the level (1 is the highest) and the period.
        public var subscriptionGroup: String?
        public var level: Int?
        public var period: SubscriptionPeriod?
        public var introductoryOffer: Offer?
        public var offerCodes: [Offer]?
        /// Consumables, non-consumables and non-renewing subscriptions: their offer codes.
        public var oneTimeOfferCodes: [OneTimeOfferCode]?
        /// Auto-renewable subscriptions: the win-back offers a lapsed subscriber may redeem,
        /// better first (renewal info's `eligibleWinBackOfferIds`; redeeming is not modelled).
        public var winBackOfferIds: [String]?
        public var familyShareable: Bool?

        func price(in storefront: String) -> Price? {
            prices.first { $0.storefront == storefront } ?? prices.first
        }
    }

    public var apps: [App]
    public var subscriptionGroups: [SubscriptionGroup]?
    public var products: [Product]

    /// Reads and checks a catalog file; errors name the bad entry.
    public init(contentsOf url: URL) throws {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw SimulatorError(.invalidConfiguration, "cannot read the catalog \(url.path): \(error.localizedDescription)")
        }
        do {
            self = try JSONDecoder().decode(Self.self, from: data)
        } catch let error as SimulatorError {
            throw SimulatorError(.invalidConfiguration, "\(url.lastPathComponent): \(error.message)")
        } catch {
            throw SimulatorError(.invalidConfiguration, "\(url.lastPathComponent) is not a catalog: \(error)")
        }
        try validate()
    }

    public init(apps: [App], subscriptionGroups: [SubscriptionGroup] = [], products: [Product]) throws {
        self.apps = apps
        self.subscriptionGroups = subscriptionGroups
        self.products = products
        try validate()
    }

    public func app(_ bundleId: String) -> App? { apps.first { $0.bundleId == bundleId } }
    public func product(_ productId: String) -> Product? { products.first { $0.productId == productId } }

    /// Checks what a running simulator relies on, naming the first bad entry.
    public func validate() throws {
        func fail(_ message: String) -> SimulatorError { SimulatorError(.invalidConfiguration, message) }
        guard !apps.isEmpty else { throw fail("the catalog has no apps") }
        var bundleIds = Set<String>()
        for app in apps {
            guard !app.bundleId.isEmpty, bundleIds.insert(app.bundleId).inserted else {
                throw fail("app \"\(app.bundleId)\": bundle ids must be unique and not empty")
            }
            if let days = app.gracePeriodDays, ![3, 16, 28].contains(days) {
                throw fail("app \(app.bundleId): gracePeriodDays must be 3, 16 or 28")
            }
        }
        let groups = Set((subscriptionGroups ?? []).map(\.id))
        var productIds = Set<String>()
        for product in products {
            let name = "product \"\(product.productId)\""
            guard !product.productId.isEmpty, productIds.insert(product.productId).inserted else {
                throw fail("\(name): product ids must be unique and not empty")
            }
            guard bundleIds.contains(product.bundleId) else { throw fail("\(name): no app has bundle id \(product.bundleId)") }
            guard [ProductType.consumable, .nonConsumable, .nonRenewing, .autoRenewable].contains(product.type) else {
                throw fail("\(name): type \"\(product.type.rawValue)\" is not one of Apple's four")
            }
            guard !product.prices.isEmpty else { throw fail("\(name): has no prices") }
            for price in product.prices + (product.introductoryOffer?.prices ?? [])
                + (product.offerCodes ?? []).flatMap({ $0.prices ?? [] }) + (product.oneTimeOfferCodes ?? []).flatMap(\.prices)
            {
                guard price.storefront.count == 3, price.currency.count == 3, price.price >= 0 else {
                    throw fail(
                        "\(name): price \(price.price) \(price.currency) in \(price.storefront) needs a 3-letter storefront and currency")
                }
            }
            if product.type == .autoRenewable {
                guard let group = product.subscriptionGroup, groups.contains(group) else {
                    throw fail("\(name): an auto-renewable subscription needs a subscriptionGroup listed in subscriptionGroups")
                }
                guard let level = product.level, level >= 1 else { throw fail("\(name): needs a level of 1 or more") }
                guard product.period != nil else { throw fail("\(name): needs a period such as P1M") }
                for offer in [product.introductoryOffer].compactMap({ $0 }) + (product.offerCodes ?? []) {
                    guard [OfferDiscountType.freeTrial, .payAsYouGo, .payUpFront].contains(offer.type) else {
                        throw fail("\(name): offer type \(offer.type.rawValue) is not FREE_TRIAL, PAY_AS_YOU_GO or PAY_UP_FRONT")
                    }
                    guard offer.type == .freeTrial || !(offer.prices ?? []).isEmpty else {
                        throw fail("\(name): a \(offer.type.rawValue) offer needs prices")
                    }
                }
                for code in product.offerCodes ?? [] where (code.id ?? "").isEmpty {
                    throw fail("\(name): every offer code needs an id")
                }
                guard product.oneTimeOfferCodes == nil else { throw fail("\(name): a subscription's offer codes are offerCodes") }
                for id in product.winBackOfferIds ?? [] where id.isEmpty { throw fail("\(name): a win-back offer id is empty") }
            } else if product.subscriptionGroup != nil || product.introductoryOffer != nil || product.offerCodes != nil
                || product.winBackOfferIds != nil
            {
                throw fail("\(name): only auto-renewable subscriptions have groups, introductory, win-back and subscription offers")
            } else {
                for code in product.oneTimeOfferCodes ?? [] where code.id.isEmpty || code.prices.isEmpty {
                    throw fail("\(name): every one-time offer code needs an id and prices")
                }
            }
        }
    }

    /// Apple's numeric storefront ids for the storefronts the demo uses.
    static let storefrontIds = [
        "USA": "143441", "FRA": "143442", "DEU": "143443", "GBR": "143444", "AUT": "143445", "BEL": "143446",
        "ITA": "143450", "NLD": "143452", "ESP": "143454", "CAN": "143455", "AUS": "143460", "JPN": "143462",
        "POL": "143478", "CHE": "143459",
    ]
}
