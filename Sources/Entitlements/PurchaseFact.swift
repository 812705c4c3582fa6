import Foundation

/// One verified App Store transaction, whatever road it came by (a StoreKit 2 signed
/// transaction, the App Store Server API, an app receipt or verifyReceipt), in the terms the
/// domain needs. Only the Worker makes these, and only from verified data.
public struct PurchaseFact: Sendable, Hashable, Codable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var bundleId: String
    public var kind: ProductKind
    /// `Production` or `Sandbox`.
    public var environment: String
    public var purchaseDate: Date
    public var expiresDate: Date?
    public var quantity: Int
    /// When Apple refunded or revoked it.
    public var revocationDate: Date?
    public var isUpgraded: Bool
    public var appAccountToken: String?
    /// The offer code or promotional offer id the customer used.
    public var offerIdentifier: String?
    public var isIntroductoryOffer: Bool
    public var isFamilyShared: Bool
    /// When Apple signed this view of it: a newer view wins over an older one.
    public var signedDate: Date?

    public init(
        transactionId: String, originalTransactionId: String, productId: String, bundleId: String, kind: ProductKind,
        environment: String, purchaseDate: Date, expiresDate: Date? = nil, quantity: Int = 1, revocationDate: Date? = nil,
        isUpgraded: Bool = false, appAccountToken: String? = nil, offerIdentifier: String? = nil, isIntroductoryOffer: Bool = false,
        isFamilyShared: Bool = false, signedDate: Date? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.bundleId = bundleId
        self.kind = kind
        self.environment = environment
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.quantity = quantity
        self.revocationDate = revocationDate
        self.isUpgraded = isUpgraded
        self.appAccountToken = appAccountToken
        self.offerIdentifier = offerIdentifier
        self.isIntroductoryOffer = isIntroductoryOffer
        self.isFamilyShared = isFamilyShared
        self.signedDate = signedDate
    }
}

/// What Apple says about a subscription's next renewal (renewal info, `pending_renewal_info`).
public struct RenewalFact: Sendable, Hashable, Codable {
    public var originalTransactionId: String
    public var autoRenew: Bool
    public var autoRenewProductId: String?
    public var isInBillingRetry: Bool
    public var gracePeriodExpiresDate: Date?
    public var signedDate: Date?

    public init(
        originalTransactionId: String, autoRenew: Bool, autoRenewProductId: String? = nil, isInBillingRetry: Bool = false,
        gracePeriodExpiresDate: Date? = nil, signedDate: Date? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.autoRenew = autoRenew
        self.autoRenewProductId = autoRenewProductId
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.signedDate = signedDate
    }
}
