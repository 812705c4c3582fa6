import Foundation

/// A customer's auto-renewable subscription as Entitle last understood it. `status` is what
/// it was when last applied; readers ask `CustomerEntitlements.subscription(originalTransactionId:at:)`,
/// which computes it for the time of the question.
public struct SubscriptionRecord: Sendable, Hashable, Codable {
    public enum Status: String, Sendable, Hashable, Codable {
        /// Paid up: access until `expiresDate`.
        case active
        /// Renewal failed; Apple keeps access during the grace period.
        case gracePeriod
        /// Renewal failed; Apple is still trying, without access.
        case billingRetry
        case expired
        /// Refunded or revoked (family sharing).
        case revoked

        public var grantsAccess: Bool { self == .active || self == .gracePeriod }
    }

    public var originalTransactionId: String
    public var offerId: String
    public var productId: String
    public var status: Status
    public var expiresDate: Date?
    public var gracePeriodExpiresDate: Date?
    public var autoRenew: Bool?
    public var autoRenewProductId: String?
    public var latestTransactionId: String
    public var isIntroductoryOffer: Bool
    public var offerIdentifier: String?
    /// The signed date of the newest Apple data applied: older views never overwrite newer.
    public var asOf: Date?
    /// Apple's last word on whether it is still trying to bill the renewal (renewal info).
    public var isInBillingRetry: Bool?
    /// The original transaction id this subscription had before it was migrated.
    public var previousOriginalTransactionId: String? = nil
    /// The billing plan (a monthly 12-month commitment: period N of M, its end, its prices,
    /// whether it renews), when Apple says.
    public var billingPlan: BillingPlan? = nil
    /// Why Apple says it expired (`expirationIntent`), once it has.
    public var expirationReason: RenewalFact.ExpirationReason? = nil
    /// A price increase announced for the next renewal: `false` until the customer agrees,
    /// `true` once they have; `nil` when none is pending.
    public var priceIncreaseConsented: Bool? = nil
    /// Access granted from a locally verified transaction while Apple could not be asked:
    /// it lasts until then unless Apple confirms it first (`CustomerEntitlements.provisional`).
    public var provisionalUntil: Date? = nil
}
