// The open enumerations of signed transactions and renewal infos, as Apple names them.

/// The kind of in-app purchase (`type`).
public struct ProductType: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let autoRenewable = Self(rawValue: "Auto-Renewable Subscription")
    public static let nonConsumable = Self(rawValue: "Non-Consumable")
    public static let consumable = Self(rawValue: "Consumable")
    public static let nonRenewing = Self(rawValue: "Non-Renewing Subscription")
}

/// Whether the customer bought the item or has it through Family Sharing.
public struct InAppOwnershipType: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let purchased = Self(rawValue: "PURCHASED")
    public static let familyShared = Self(rawValue: "FAMILY_SHARED")
}

/// Why a transaction happened: a purchase or an automatic renewal.
public struct TransactionReason: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let purchase = Self(rawValue: "PURCHASE")
    public static let renewal = Self(rawValue: "RENEWAL")
}

/// The kind of offer applied (`offerType`).
public struct OfferType: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let introductory = Self(rawValue: 1)
    public static let promotional = Self(rawValue: 2)
    public static let offerCode = Self(rawValue: 3)
    public static let winBack = Self(rawValue: 4)
}

/// How an offer is paid: free trial, pay as you go, pay up front.
public struct OfferDiscountType: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let freeTrial = Self(rawValue: "FREE_TRIAL")
    public static let payAsYouGo = Self(rawValue: "PAY_AS_YOU_GO")
    public static let payUpFront = Self(rawValue: "PAY_UP_FRONT")
    /// A one-time offer code on a consumable, non-consumable or non-renewing subscription.
    public static let oneTime = Self(rawValue: "ONE_TIME")
}

/// Why Apple refunded or revoked a transaction.
public struct RevocationReason: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Refunded for another reason, such as an accidental purchase.
    public static let other = Self(rawValue: 0)
    /// Refunded because of an actual or perceived issue in the app.
    public static let appIssue = Self(rawValue: 1)
}

/// How much of a transaction was revoked.
public struct RevocationType: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let refundFull = Self(rawValue: "REFUND_FULL")
    public static let refundProrated = Self(rawValue: "REFUND_PRORATED")
    public static let familyRevoke = Self(rawValue: "FAMILY_REVOKE")
}

/// Why a subscription expired.
public struct ExpirationIntent: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let customerCancelled = Self(rawValue: 1)
    public static let billingError = Self(rawValue: 2)
    public static let declinedPriceIncrease = Self(rawValue: 3)
    public static let productUnavailable = Self(rawValue: 4)
    public static let other = Self(rawValue: 5)
}

/// Whether a subscription renews automatically.
public struct AutoRenewStatus: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let off = Self(rawValue: 0)
    public static let on = Self(rawValue: 1)
}

/// Whether the customer consented to a price increase.
public struct PriceIncreaseStatus: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let notResponded = Self(rawValue: 0)
    public static let consented = Self(rawValue: 1)
}

/// The state of an auto-renewable subscription (Get All Subscription Statuses, notifications).
public struct SubscriptionStatus: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let active = Self(rawValue: 1)
    public static let expired = Self(rawValue: 2)
    public static let billingRetry = Self(rawValue: 3)
    public static let billingGracePeriod = Self(rawValue: 4)
    public static let revoked = Self(rawValue: 5)
}
