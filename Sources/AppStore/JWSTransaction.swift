/// A StoreKit 2 transaction, decoded from a verified `signedTransactionInfo`
/// (Apple's `JWSTransactionDecodedPayload`).
public struct JWSTransaction: SignedPayload, Codable, Hashable {
    public init() {}

    public var originalTransactionId: String?
    public var transactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: AppleTimestamp?
    public var originalPurchaseDate: AppleTimestamp?
    public var expiresDate: AppleTimestamp?
    public var quantity: Int?
    public var type: ProductType?
    /// The UUID the app attached to the purchase, usually the publisher's account id.
    public var appAccountToken: String?
    public var inAppOwnershipType: InAppOwnershipType?
    public var signedDate: AppleTimestamp?
    public var revocationReason: RevocationReason?
    public var revocationDate: AppleTimestamp?
    public var revocationType: RevocationType?
    /// The share of the purchase refunded or revoked, in milliunits of a percent
    /// (0 to 100000: 50000 is 50 %, 67932 is 67.932 %); absent once a refund is reversed.
    public var revocationPercentage: Int?
    public var isUpgraded: Bool?
    public var offerType: OfferType?
    public var offerIdentifier: String?
    public var offerDiscountType: OfferDiscountType?
    public var offerPeriod: String?
    public var environment: AppStoreEnvironment?
    public var storefront: String?
    public var storefrontId: String?
    public var transactionReason: TransactionReason?
    /// ISO 4217 currency code.
    public var currency: String?
    /// Price in milliunits of `currency`.
    public var price: Int64?
    public var appTransactionId: String?
    /// The subscription's original transaction id before it was migrated (`MIGRATION`).
    public var previousOriginalTransactionId: String?
    /// `BILLED_UPFRONT` or `MONTHLY` (a monthly plan with a 12-month commitment).
    public var billingPlanType: BillingPlanType?
    /// Where a monthly commitment plan stands (period N of M, its end, its total price).
    public var commitmentInfo: TransactionCommitmentInfo?

    public var payloadEnvironment: AppStoreEnvironment? { environment }
    public var payloadBundleId: String? { bundleId }
    public var payloadAppAppleId: Int64? { nil }
    /// Every transaction names its app or itself (Apple's own mock names only its app); a
    /// renewal info, which names neither, decodes as one with nothing in it.
    public var kindProblem: String? {
        bundleId == nil && transactionId == nil
            ? "Apple-signed but not a transaction: it names no app and no transaction (a renewal info?)" : nil
    }
}
