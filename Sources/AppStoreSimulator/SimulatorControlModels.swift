import AppStore
import Foundation

/// `POST /simulator/purchases`: a customer buys a product.
public struct PurchaseRequest: Codable, Sendable, Hashable {
    public var bundleId: String
    public var productId: String
    /// A UUID the app attached to the purchase.
    public var appAccountToken: String?
    /// `Sandbox` (the default) or `Production`.
    public var environment: AppStoreEnvironment?
    /// Consumables only: 1 to 10.
    public var quantity: Int?
    /// ISO 3166 alpha-3; `USA` by default.
    public var storefront: String?
    /// Redeem this offer code (an auto-renewable subscription's, or a one-time product's).
    public var offerCode: String?
    /// Apply the introductory offer when eligible (the default, as on devices).
    public var useIntroductoryOffer: Bool?
    /// The Apple account buying; a new account when absent. Receipts, history and
    /// eligibility are per account.
    public var appleAccount: String?
    /// Acquired through Family Sharing (`inAppOwnershipType` FAMILY_SHARED).
    public var familyShared: Bool?
    /// `MONTHLY`: a yearly subscription bought as a monthly plan with a 12-month
    /// commitment, billed month by month (`BILLED_UPFRONT`, the default, bills the year).
    public var billingPlanType: BillingPlanType?

    public init(bundleId: String, productId: String) {
        self.bundleId = bundleId
        self.productId = productId
    }
}

/// What a purchase produced: what StoreKit 2 gives the app, and the legacy receipt.
public struct PurchaseResult: Codable, Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var signedTransaction: String
    /// Base64 PKCS#7 app receipt holding the account's purchases for the app.
    public var appReceipt: String
    public var signedRenewalInfo: String?
    public var appleAccount: String
    public var orderId: String
    /// The V2 notifications the purchase sent.
    public var notifications: [String]
}

/// The state of one subscription after a lifecycle event.
public struct SubscriptionSnapshot: Codable, Sendable, Hashable {
    public var originalTransactionId: String
    public var productId: String
    public var autoRenewProductId: String
    public var status: SubscriptionStatus
    public var autoRenewStatus: Bool
    public var expiresDate: AppleTimestamp
    public var gracePeriodExpiresDate: AppleTimestamp?
    public var transactionIds: [String]
    public var signedTransaction: String
    public var signedRenewalInfo: String
    public var appReceipt: String
    /// The V2 notifications the event sent (their `notificationUUID`s).
    public var notifications: [String]
    /// Every change of the subscription's state, transaction or renewal preference, oldest first.
    public var history: [SubscriptionHistoryEntry]
}

/// One change in a subscription's life, when the App Store made it.
public struct SubscriptionHistoryEntry: Codable, Sendable, Hashable {
    public var at: AppleTimestamp
    /// Apple's status from then on (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked).
    public var status: SubscriptionStatus
    /// The transaction giving (or that last gave) access.
    public var transactionId: String
    public var autoRenewStatus: Bool
    public var autoRenewProductId: String
    /// Why it expired (`expirationIntent`), once it has.
    public var expirationIntent: ExpirationIntent?
}

/// The state of one transaction after a lifecycle event.
public struct TransactionSnapshot: Codable, Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var revoked: Bool
    public var signedTransaction: String
    /// What the developer sent with Send Consumption Information (V2), and with V1.
    public var consumption: ConsumptionRequest?
    public var consumptionV1: ConsumptionRequestV1?
    /// When the publisher's server called Finish Transaction for it (ms since 1970).
    public var finishedDate: AppleTimestamp?
    public var notifications: [String]
}

/// Bodies of the lifecycle routes; each route reads the fields it needs.
public struct LifecycleRequest: Codable, Sendable, Hashable {
    /// upgrade, downgrade, crossgrade: the product to move to.
    public var productId: String?
    /// refund: 0 (other) or 1 (an issue with the app).
    public var reason: Int?
    /// refund: the share refunded for a prorated refund, as Apple's `revocationPercentage`:
    /// milliunits of a percent, 1 to 99999 (50000 is 50 %). Absent: a full refund.
    public var percentage: Int?
    /// price-increase: the new price in the subscription's currency.
    public var price: Double?
    /// price-increase: whether customers must agree (Apple asks when the rise is large).
    public var requiresConsent: Bool?
    /// price-increase-consent: agree or decline.
    public var accept: Bool?
    /// extend: 1 to 90 days.
    public var days: Int?
    /// extend: Apple's reason code, 0 to 3.
    public var reasonCode: Int?
    /// consumption-request: Apple's reason (`UNINTENDED_PURCHASE`, ...).
    public var consumptionReason: ConsumptionRequestReason?
    /// offer-redeemed: `UPGRADE`, `DOWNGRADE`, or none (the current product).
    public var subtype: String?

    public init() {}
}

/// `POST /simulator/mass-extensions`: extend every active subscription of a product.
public struct MassExtensionRequest: Codable, Sendable, Hashable {
    public var bundleId: String
    public var productId: String
    public var days: Int
    public var reasonCode: Int?
    public var requestIdentifier: String?
    /// Sandbox unless told.
    public var environment: AppStoreEnvironment?
}

/// `POST /simulator/external-purchase-tokens`: Apple tells the app's server about an
/// external purchase token.
public struct ExternalPurchaseTokenRequest: Codable, Sendable, Hashable {
    public var bundleId: String
    /// `CREATED`, `ACTIVE_TOKEN_REMINDER` (custom link tokens) or `UNREPORTED`.
    public var subtype: String
    /// Sandbox unless told; a sandbox token's id starts with `SANDBOX`, as Apple's do.
    public var environment: AppStoreEnvironment?
    /// The token a reminder is about; a new id when absent.
    public var externalPurchaseId: String?
    /// `SERVICES` (the default for custom link tokens) or `ACQUISITION`.
    public var tokenType: String?
    /// How long a custom link token lives (Apple does not say; 30 days unless told).
    public var validForDays: Int?

    public init(
        bundleId: String, subtype: String, environment: AppStoreEnvironment? = nil, externalPurchaseId: String? = nil,
        tokenType: String? = nil, validForDays: Int? = nil
    ) {
        self.bundleId = bundleId
        self.subtype = subtype
        self.environment = environment
        self.externalPurchaseId = externalPurchaseId
        self.tokenType = tokenType
        self.validForDays = validForDays
    }
}

/// The token and the notification that announced it.
public struct ExternalPurchaseTokenResult: Codable, Sendable, Hashable {
    public var externalPurchaseId: String
    public var notificationUUID: String
}
