import Foundation

/// The kinds of change in a customer's purchases that Entitle records, tells the publisher
/// about (webhooks) and reports on. The raw values are the names on the wire.
public enum LifecycleEventType: String, Sendable, Hashable, Codable, CaseIterable {
    /// A subscription's first paid transaction.
    case initialPurchase = "initial_purchase"
    /// A subscription's first transaction is a free trial.
    case trialStarted = "trial_started"
    /// The first paid transaction after a free trial.
    case trialConverted = "trial_converted"
    /// A paid transaction continuing a subscription (`resubscribed` when it had lapsed).
    case renewal
    /// An upgrade, downgrade or crossgrade: at once (a new transaction) or at renewal.
    case productChange = "product_change"
    /// Auto-renew turned off.
    case cancellation
    /// Auto-renew turned on again.
    case uncancellation
    /// A renewal failed and Apple is trying to bill it (billing retry).
    case billingIssue = "billing_issue"
    /// Apple keeps access while it retries billing.
    case gracePeriodStarted = "grace_period_started"
    /// The grace period ended with billing still failing: access stops, Apple goes on trying.
    case gracePeriodExpired = "grace_period_expired"
    /// A renewal Apple had trouble billing went through.
    case billingRecovered = "billing_recovered"
    /// The subscription ended for good (`reason`).
    case expiration
    /// Apple refunded a transaction, in full or prorated.
    case refund
    /// Apple reversed a refund.
    case refundReversed = "refund_reversed"
    /// A refund recorded without its kind and share (a receipt, or a V1 notification alone,
    /// says a transaction was refunded but not how much), told again by Apple's signed view:
    /// `refundMilliunits` is what the refund took, `previousRefundMilliunits` what was
    /// recorded (the whole price).
    case refundAdjusted = "refund_adjusted"
    /// Family Sharing access was revoked.
    case revoked
    /// The purchase moved to another customer.
    case transfer
    /// A consumable, non-consumable or non-renewing subscription was bought.
    case nonRenewingPurchase = "non_renewing_purchase"
    /// Apple extended a subscription's renewal date.
    case `extension`
    /// The customer redeemed an offer (introductory, promotional, offer code, win-back).
    case offerRedeemed = "offer_redeemed"
    /// Apple announced a price increase, or the customer agreed to one.
    case priceIncrease = "price_increase"
    case creditsGranted = "credits_granted"
    case creditsSpent = "credits_spent"
    case creditsClawedBack = "credits_clawed_back"
    /// Access granted from a purchase verified here while Apple could not be asked: it lasts
    /// until `provisionalUntil` unless Apple confirms it first.
    case temporaryAccessGranted = "temporary_access_granted"
    /// Apple's word replaced a provisional grant: `confirmed` when the purchase still gives
    /// access, not when Apple said it ended (a refund, an expiry: their own events say when).
    case temporaryAccessResolved = "temporary_access_resolved"

    /// The types whose events carry revenue: each new paid transaction is exactly one of them.
    public var carriesRevenue: Bool {
        switch self {
        case .initialPurchase, .trialConverted, .renewal, .nonRenewingPurchase: true
        case .productChange: true
        default: false
        }
    }

    /// The name receivers built before the lifecycle events know this type by, if any
    /// (`purchase`, `renewal`, `expiration`, `refund`, `refund_reversed`, `transfer`, `credit`).
    public var legacyName: String? {
        switch self {
        case .initialPurchase, .trialStarted, .nonRenewingPurchase: "purchase"
        case .trialConverted, .renewal: "renewal"
        case .expiration, .gracePeriodExpired: "expiration"
        case .refund, .revoked: "refund"
        case .refundReversed: "refund_reversed"
        case .transfer: "transfer"
        case .creditsGranted, .creditsSpent, .creditsClawedBack: "credit"
        default: nil
        }
    }
}

/// One change in a customer's purchases, as the event log keeps it and a webhook tells it.
/// Its `id` is derived from Apple's ids (and the change's own facts), so a rerun, a replayed
/// notification or a reclaimed job never makes a second event.
public struct LifecycleEvent: Sendable, Hashable, Codable {
    public var id: String
    public var type: LifecycleEventType
    public var publisher: String
    public var customer: String
    /// When Apple says it happened.
    public var occurredAt: Date
    /// When Entitle recorded it (App Store time).
    public var recordedAt: Date
    /// The customer's version after the change that made this event.
    public var customerVersion: Int?

    public var transactionId: String?
    public var originalTransactionId: String?
    public var productId: String?
    public var offerId: String?
    public var storefront: String?
    public var environment: String?
    /// The transaction's price in milliunits of `currency` (1990 for 1.99), with where it
    /// came from (`apple`, `reported` by the app, or the `catalog`).
    public var priceMilliunits: Int64?
    public var currency: String?
    public var priceSource: PurchaseFact.PriceSource?
    public var expiresDate: Date?
    /// A family member's access through Family Sharing (not the purchaser's).
    public var familyShared: Bool?
    /// The customer has this purchase through the publisher's `share` policy, not as its
    /// holder: the holder's events count it in reports.
    public var shared: Bool?

    /// Product changes: from and to, `immediate` or `atRenewal`, and the kind (`upgrade`,
    /// `downgrade`, `crossgrade`).
    public var fromProductId: String?
    public var toProductId: String?
    public var effective: String?
    public var change: String?
    /// Expirations, cancellations: why (`voluntary`, `billing`, `priceIncreaseDeclined`,
    /// `refund`, `productNotForSale`, `other`).
    public var reason: String?
    /// Expirations: the subscription's last period was a free trial.
    public var trial: Bool?
    /// Renewals: the subscription had lapsed (a resubscription).
    public var resubscribed: Bool?
    /// Billing issues and grace periods: when the grace period ends.
    public var gracePeriodExpiresDate: Date?
    /// Refunds: Apple's `revocationType`, `revocationPercentage` (milliunits of a percent) and
    /// the amount refunded (the price times the percentage, in milliunits).
    public var revocationType: String?
    public var revocationPercentage: Int?
    public var refundMilliunits: Int64?
    /// `refund_adjusted`: the amount the refund was recorded with before Apple told its share.
    public var previousRefundMilliunits: Int64?
    /// Transfers: who held the purchase, who holds it now, who asked and why it was believed.
    public var from: String?
    public var to: String?
    public var road: String?
    public var vouchedBy: String?
    public var appAccountTokenMatched: Bool?
    /// Offers redeemed: the kind and Apple's offer identifier.
    public var offerKind: PurchaseFact.OfferKind?
    public var offerIdentifier: String?
    /// Price increases: whether the customer agreed.
    public var consented: Bool?
    /// Extensions: the expiry before.
    public var previousExpiresDate: Date?
    /// Credits: the change, the balance after and before it, a clawback's percentage and
    /// what it could not take (already spent), a spend's reference.
    public var amount: Int?
    public var balance: Int?
    public var previousBalance: Int?
    public var shortfall: Int?
    public var reference: String?
    /// The purchase's access was granted while Apple could not be asked, and lasts until
    /// `provisionalUntil` unless Apple confirms it first.
    public var provisional: Bool?
    public var provisionalUntil: Date?
    /// A purchase the publisher brought with it (`entitle import`), not a new one.
    public var imported: Bool?
    /// `temporary_access_resolved`: whether Apple's word kept the access.
    public var confirmed: Bool?
    /// `refund_reversed`: the subscription the refund had ended goes on, so the refund's
    /// `expiration` no longer stands (`trial`: it was a trial's).
    public var restored: Bool?

    public init(
        id: String, type: LifecycleEventType, publisher: String, customer: String, occurredAt: Date, recordedAt: Date
    ) {
        self.id = id
        self.type = type
        self.publisher = publisher
        self.customer = customer
        self.occurredAt = occurredAt
        self.recordedAt = recordedAt
    }

    /// The event's transaction, product, offer, storefront, environment and price from a fact
    /// (the catalog's offer price, marked so, when neither Apple nor the app gave one). Apple's
    /// price is the transaction's, quantity included; the catalog's is a unit's, so it is
    /// multiplied by the quantity bought.
    public mutating func describe(_ fact: PurchaseFact, offer: Offer?) {
        transactionId = fact.transactionId
        originalTransactionId = fact.originalTransactionId
        productId = fact.productId
        offerId = offer?.offerId
        storefront = fact.storefront
        environment = fact.environment
        expiresDate = fact.expiresDate
        familyShared = fact.isFamilyShared ? true : nil
        if let price = fact.priceMilliunits {
            priceMilliunits = price
            currency = fact.currency
            priceSource = fact.priceSource ?? .apple
        } else if let price = offer?.price, price >= 0, price < 1e12, let currency = offer?.currency {
            let (total, overflow) = Int64((price * 1000).rounded()).multipliedReportingOverflow(by: Int64(max(1, fact.quantity)))
            guard !overflow else { return }
            priceMilliunits = total
            self.currency = currency
            priceSource = .catalog
        }
    }
}
