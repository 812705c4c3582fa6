import Foundation

/// How Apple bills a subscription (App Store Server API 1.21): up front for each period, or
/// monthly during a 12-month commitment. Access still follows each month's `expiresDate`;
/// the plan is kept for readers and revenue figures.
public struct BillingPlan: Sendable, Hashable, Codable {
    /// `MONTHLY` (a 12-month commitment billed month by month) or `BILLED_UPFRONT`.
    public var type: String
    /// Which billing period the latest transaction paid for (1 to `periods`).
    public var period: Int?
    /// How many periods the commitment has (12).
    public var periods: Int?
    /// When the whole commitment ends (not when access ends: that is each month's expiry).
    public var commitmentExpiresDate: Date?
    /// The whole commitment's price and one month's, as decimal text in `currency`.
    public var commitmentPrice: String?
    public var monthlyPrice: String?
    public var currency: String?
    /// From the renewal info: whether the commitment renews when it ends (turning it off
    /// leaves monthly billing and access running to the commitment's end), into which
    /// product and billing plan, when, and at what price.
    public var commitmentRenews: Bool?
    public var commitmentRenewalProductId: String?
    public var commitmentRenewalBillingPlanType: String?
    public var commitmentRenewalDate: Date?
    public var commitmentRenewalPrice: String?
    /// The plan the next renewal uses (`renewalBillingPlanType`).
    public var renewalBillingPlanType: String?

    public init(type: String) { self.type = type }

    /// Whether it is billed monthly under a commitment (no billing grace period applies).
    public var isMonthlyCommitment: Bool { type == "MONTHLY" }

    /// This plan (a transaction's) with what a renewal info says of what comes next.
    public func renewing(_ renewal: BillingPlan?) -> BillingPlan {
        var merged = self
        guard let renewal else { return merged }
        merged.commitmentRenews = renewal.commitmentRenews
        merged.commitmentRenewalProductId = renewal.commitmentRenewalProductId
        merged.commitmentRenewalBillingPlanType = renewal.commitmentRenewalBillingPlanType
        merged.commitmentRenewalDate = renewal.commitmentRenewalDate
        merged.commitmentRenewalPrice = renewal.commitmentRenewalPrice
        merged.renewalBillingPlanType = renewal.renewalBillingPlanType
        return merged
    }
}
