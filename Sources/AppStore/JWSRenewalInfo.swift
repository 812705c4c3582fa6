/// The renewal state of an auto-renewable subscription, decoded from a verified
/// `signedRenewalInfo` (Apple's `JWSRenewalInfoDecodedPayload`).
public struct JWSRenewalInfo: SignedPayload, Codable, Hashable {
    public init() {}

    public var expirationIntent: ExpirationIntent?
    public var originalTransactionId: String?
    public var autoRenewProductId: String?
    public var productId: String?
    public var autoRenewStatus: AutoRenewStatus?
    public var isInBillingRetryPeriod: Bool?
    public var priceIncreaseStatus: PriceIncreaseStatus?
    public var gracePeriodExpiresDate: AppleTimestamp?
    public var offerType: OfferType?
    public var offerIdentifier: String?
    public var offerDiscountType: OfferDiscountType?
    public var offerPeriod: String?
    public var signedDate: AppleTimestamp?
    public var environment: AppStoreEnvironment?
    public var recentSubscriptionStartDate: AppleTimestamp?
    public var renewalDate: AppleTimestamp?
    public var renewalPrice: Int64?
    public var currency: String?
    public var eligibleWinBackOfferIds: [String]?
    public var appAccountToken: String?
    public var appTransactionId: String?
    /// The billing plan the next renewal uses (`BILLED_UPFRONT`, `MONTHLY`).
    public var renewalBillingPlanType: BillingPlanType?
    /// Whether and how a 12-month commitment renews when it ends.
    public var commitmentInfo: RenewalCommitmentInfo?

    public var payloadEnvironment: AppStoreEnvironment? { environment }
    public var payloadBundleId: String? { nil }
    /// Apple's renewal info names no app: it is checked through the transaction it goes with.
    public static var namesItsApp: Bool { false }
    public var payloadAppAppleId: Int64? { nil }
}
