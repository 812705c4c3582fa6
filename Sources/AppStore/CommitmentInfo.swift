/// How a subscription is billed (`billingPlanType`, `renewalBillingPlanType`,
/// `commitmentRenewalBillingPlanType`): up front for the whole period, or monthly during a
/// 12-month commitment (App Store Server API 1.21).
public struct BillingPlanType: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let billedUpfront = Self(rawValue: "BILLED_UPFRONT")
    public static let monthly = Self(rawValue: "MONTHLY")
}

/// A monthly subscription's 12-month commitment as one transaction sees it (Apple's
/// `TransactionCommitmentInfo`).
public struct TransactionCommitmentInfo: Codable, Hashable, Sendable {
    public init() {}

    /// Which billing period this transaction pays for, 1 to `totalBillingPeriods`.
    public var billingPeriodNumber: Int?
    /// How many periods the commitment has (12).
    public var totalBillingPeriods: Int?
    /// When the whole commitment ends; access still follows the transaction's `expiresDate`.
    public var commitmentExpiresDate: AppleTimestamp?
    /// The whole commitment's price, in milliunits of the transaction's currency.
    public var commitmentPrice: Int64?
}

/// What happens when a 12-month commitment ends (Apple's `RenewalCommitmentInfo`).
public struct RenewalCommitmentInfo: Codable, Hashable, Sendable {
    public init() {}

    public var commitmentAutoRenewProductId: String?
    /// Whether the commitment renews; monthly billing goes on to its end either way.
    public var commitmentAutoRenewStatus: AutoRenewStatus?
    public var commitmentRenewalBillingPlanType: BillingPlanType?
    public var commitmentRenewalDate: AppleTimestamp?
    /// The price at the commitment's renewal, in milliunits of the renewal currency.
    public var commitmentRenewalPrice: Int64?
}
