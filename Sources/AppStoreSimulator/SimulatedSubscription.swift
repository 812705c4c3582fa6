import AppStore
import Foundation

/// An auto-renewable subscription: one original transaction id per account and group, and
/// the renewal state Apple keeps for it.
struct SimulatedSubscription: Sendable {
    enum State: Sendable {
        case active, gracePeriod, billingRetry, expired, revoked

        var status: SubscriptionStatus {
            switch self {
            case .active: .active
            case .expired: .expired
            case .billingRetry: .billingRetry
            case .gracePeriod: .billingGracePeriod
            case .revoked: .revoked
            }
        }
    }

    /// An introductory offer or offer code still running.
    struct RunningOffer: Sendable {
        var offerType: OfferType
        var discountType: OfferDiscountType
        var identifier: String?
        var period: SubscriptionPeriod
        /// Transactions still to bill at the offer (pay as you go).
        var remainingPeriods: Int
        var price: Int64
    }

    /// A yearly product bought as a monthly plan with a 12-month commitment (API 1.21).
    struct Commitment: Sendable {
        /// The billing period the latest transaction paid for, 1 to `periods`.
        var period = 1
        var periods = 12
        /// When the whole commitment ends.
        var expiresDate: Date
        var monthlyPrice: Int64
        /// Whether the commitment renews when it ends (the customer can turn it off; monthly
        /// billing goes on to the end either way).
        var renews = true
    }

    /// A price increase announced for the next renewals.
    struct PriceIncrease: Sendable {
        var price: Int64
        var requiresConsent: Bool
        var consented: Bool?
    }

    var originalTransactionId: String
    var account: String
    var bundleId: String
    var environment: AppStoreEnvironment
    var groupId: String
    var productId: String
    var autoRenewProductId: String
    var autoRenew = true
    var state = State.active
    var expiresDate: Date
    var originalPurchaseDate: Date
    var recentStartDate: Date
    var transactionIds: [String] = []
    var renewals = 0
    /// The customer's payment method fails at the next billing attempts.
    var paymentFails = false
    var gracePeriodExpires: Date?
    var billingRetryEnds: Date?
    var expirationIntent: ExpirationIntent?
    var offer: RunningOffer?
    var commitment: Commitment?
    var priceIncrease: PriceIncrease?
    var appAccountToken: String?
    var storefront: String
    var currency: String
    var ownership: InAppOwnershipType
    /// Renewal-date extension request ids already applied (Apple deduplicates by them).
    var extensionRequests: Set<String> = []
    /// Every change of state, transaction or renewal preference, when it happened: the
    /// simulator's own record, which tests compute reference figures from.
    var history: [SubscriptionHistoryEntry] = []

    var latestTransactionId: String { transactionIds.last ?? originalTransactionId }

    /// When the scheduler must next look at this subscription.
    var nextDue: Date? {
        switch state {
        case .active: expiresDate
        case .gracePeriod: gracePeriodExpires
        case .billingRetry: billingRetryEnds
        case .expired, .revoked: nil
        }
    }
}
