import Foundation

/// What a publisher sells, mapped to the App Store products that buy it.
public struct Offer: Sendable, Hashable, Codable {
    public var offerId: String
    /// The App Store product ids that buy this offer.
    public var productIds: [String]
    /// For reporting only: Apple decides what customers pay.
    public var price: Double?
    public var currency: String?
    /// The entitlements the offer grants (`premium`, `issue:2026-11`).
    public var entitlements: [String]
    /// Consumables: credits per unit bought.
    public var credits: Int?
    /// Non-renewing subscriptions: how many days of access a purchase gives.
    public var accessDays: Int?

    public init(offerId: String, productIds: [String], entitlements: [String] = [], credits: Int? = nil, accessDays: Int? = nil) {
        self.offerId = offerId
        self.productIds = productIds
        self.entitlements = entitlements
        self.credits = credits
        self.accessDays = accessDays
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        offerId = try container.decode(String.self, forKey: .offerId)
        productIds = try container.decode([String].self, forKey: .productIds)
        price = try container.decodeIfPresent(Double.self, forKey: .price)
        currency = try container.decodeIfPresent(String.self, forKey: .currency)
        entitlements = try container.decodeIfPresent([String].self, forKey: .entitlements) ?? []
        credits = try container.decodeIfPresent(Int.self, forKey: .credits)
        accessDays = try container.decodeIfPresent(Int.self, forKey: .accessDays)
    }
}
