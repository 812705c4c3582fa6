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
    /// `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE`, with `revocationDate` (Apple
    /// sends it since API 1.19; older data has none, which reads as a full refund).
    public var revocationType: String?
    /// The share refunded, in milliunits of a percent (50000 is 50 %), with `revocationDate`.
    public var revocationPercentage: Int?
    /// A migrated subscription's original transaction id before the migration (`MIGRATION`):
    /// whoever held that chain holds this one.
    public var previousOriginalTransactionId: String?
    /// How Apple bills it (`billingPlanType`, `commitmentInfo`): subscriptions only.
    public var billingPlan: BillingPlan?
    public var isUpgraded: Bool
    public var appAccountToken: String?
    /// The offer code or promotional offer id the customer used.
    public var offerIdentifier: String?
    public var isIntroductoryOffer: Bool
    /// How the offer discounts (`FREE_TRIAL`, `PAY_AS_YOU_GO`, `PAY_UP_FRONT`), when Apple says.
    public var offerDiscountType: String?
    public var isFamilyShared: Bool
    /// When Apple signed this view of it: a newer view wins over an older one.
    public var signedDate: Date?
    /// What the customer paid, as decimal text in `currency` units (`"0.99"`), for
    /// reporting: Apple's signed price when it gives one, else what the app reported.
    public var price: String?
    /// ISO 4217, with `price`.
    public var currency: String?
    /// Where `price` comes from: Apple's signed transaction, or what the app reported.
    public var priceSource: PriceSource?
    /// The App Store storefront (ISO 3166-1 alpha-3), when Apple says.
    public var storefront: String?
    /// The kind of offer the customer redeemed with this transaction, when Apple says.
    public var offerKind: OfferKind?
    /// The expiry this transaction had before Apple extended its renewal date (the period
    /// it was bought for); `nil` when it was never extended.
    public var expiresBeforeExtension: Date?
    /// When a refund of this transaction was last seen reversed (the reversing view's
    /// signed date): a view of a refund from before it tells of an earlier refund, not of
    /// the one the transaction may have now.
    public var reversedAt: Date?

    /// Where a price comes from: events and reports say so beside every amount.
    public enum PriceSource: String, Sendable, Hashable, Codable {
        /// Apple's signed transaction (`price`, `currency`).
        case apple
        /// What the app reported with a purchase Apple's data gives no price for (receipts).
        case reported
        /// The catalog's offer price, for a purchase nobody gave a price for.
        case catalog
    }

    /// Apple's kinds of offer (`offerType` 1 to 4).
    public enum OfferKind: String, Sendable, Hashable, Codable {
        case introductory, promotional, offerCode, winBack
    }

    public init(
        transactionId: String, originalTransactionId: String, productId: String, bundleId: String, kind: ProductKind,
        environment: String, purchaseDate: Date, expiresDate: Date? = nil, quantity: Int = 1, revocationDate: Date? = nil,
        isUpgraded: Bool = false, appAccountToken: String? = nil, offerIdentifier: String? = nil, isIntroductoryOffer: Bool = false,
        isFamilyShared: Bool = false, signedDate: Date? = nil, price: String? = nil, currency: String? = nil,
        offerDiscountType: String? = nil, revocationType: String? = nil, revocationPercentage: Int? = nil,
        previousOriginalTransactionId: String? = nil, billingPlan: BillingPlan? = nil, priceSource: PriceSource? = nil,
        storefront: String? = nil, offerKind: OfferKind? = nil
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
        self.price = price
        self.currency = currency
        self.offerDiscountType = offerDiscountType
        self.revocationType = revocationType
        self.revocationPercentage = revocationPercentage
        self.previousOriginalTransactionId = previousOriginalTransactionId
        self.billingPlan = billingPlan
        self.priceSource = price == nil ? nil : (priceSource ?? .apple)
        self.storefront = storefront
        self.offerKind = offerKind
    }

    /// A free trial: an introductory offer the customer pays nothing for.
    public var isFreeTrial: Bool { offerDiscountType == "FREE_TRIAL" }

    /// `price` in milliunits of `currency` (`"1.99"` is 1990); `nil` without a price.
    public var priceMilliunits: Int64? { price.flatMap(Self.milliunits(decimal:)) }

    /// Decimal text (`"1.99"`, `"120"`) in milliunits, rounded to the nearest milliunit; `nil`
    /// for text that is not a non-negative decimal of at most 15 whole digits.
    public static func milliunits(decimal text: String) -> Int64? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let whole = parts.first, (1...15).contains(whole.count),
            whole.allSatisfy({ $0.isASCII && $0.isNumber }), let units = Int64(whole)
        else { return nil }
        var fraction = parts.count == 2 ? String(parts[1]) : ""
        guard fraction.allSatisfy({ $0.isASCII && $0.isNumber }), fraction.count <= 12 else { return nil }
        let roundUp = fraction.count > 3 && (fraction[fraction.index(fraction.startIndex, offsetBy: 3)].wholeNumberValue ?? 0) >= 5
        fraction = String((fraction + "000").prefix(3))
        guard let thousandths = Int64(fraction) else { return nil }
        return units * 1000 + thousandths + (roundUp ? 1 : 0)
    }

    /// This view, with what it leaves unsaid taken from `other`, another view of the same
    /// transaction. Apple fixes a transaction's price, storefront, offer, billing plan and
    /// ownership when it is bought, and a receipt (verifyReceipt's answer) gives no price or
    /// storefront and only part of the rest: a receipt's view signed after a signed
    /// transaction's must not erase them (reports by storefront, offer and price would lose
    /// the purchase). Apple's price stands against one the app reported. What can change
    /// (expiry, revocation, upgrade, the account token Apple sets again) is each view's own
    /// word where it says it.
    public func filled(from other: PurchaseFact) -> PurchaseFact {
        var view = self
        if other.price != nil, view.price == nil || other.priceRank > view.priceRank {
            view.price = other.price
            view.currency = other.currency
            view.priceSource = other.priceSource
        }
        view.storefront = view.storefront ?? other.storefront
        // The offer as one: a kind with another view's offer name would be neither.
        if view.offerKind == nil || view.offerKind == other.offerKind {
            view.offerKind = other.offerKind
            view.offerIdentifier = view.offerIdentifier ?? other.offerIdentifier
            view.offerDiscountType = view.offerDiscountType ?? other.offerDiscountType
        }
        view.reversedAt = [view.reversedAt, other.reversedAt].compactMap { $0 }.max()
        if let told = view.revocationDate, let signed = other.revocationDate, view.revocationType == nil, other.revocationType != nil,
            signed <= told.addingTimeInterval(1), signed > view.reversedAt ?? .distantPast
        {
            // The same refund, told by a receipt or recorded when a V1 notification said it
            // (at the job's time, after Apple's) without its kind and share: Apple's signed
            // word on them stands. Not a refund from before a reversal: that one was another.
            // The view's date stays: a period or an expiry already ended there.
            view.revocationType = other.revocationType
            view.revocationPercentage = other.revocationPercentage
        }
        view.appAccountToken = view.appAccountToken ?? other.appAccountToken
        view.billingPlan = view.billingPlan ?? other.billingPlan
        view.previousOriginalTransactionId = view.previousOriginalTransactionId ?? other.previousOriginalTransactionId
        // An app's receipt does not say who owns a purchase: Family Sharing, once said, stands.
        view.isFamilyShared = view.isFamilyShared || other.isFamilyShared
        return view
    }

    /// Whose price is surer: Apple's signed one, then the app's report, then the catalog's.
    var priceRank: Int {
        switch priceSource {
        case .apple: 2
        case .reported: 1
        case .catalog, nil: 0
        }
    }

    /// Whether this is an older view of the transaction than `stored`: Apple signed it
    /// earlier, or in the same millisecond without the revocation `stored` carries. A refund
    /// is never undone within the millisecond it was signed in, so of two views signed
    /// together the one with it is the later; without this a view read before a refund and
    /// applied after it (a job that waited for the customer) would give the access back.
    public func isOlderView(than stored: PurchaseFact) -> Bool {
        guard let old = stored.signedDate, let new = signedDate else { return false }
        if old != new { return old > new }
        return stored.revocationDate != nil && revocationDate == nil
    }

    /// Whether this view stands over `other`, of the same transaction, where two that Apple
    /// signed apart meet before either is applied (a claim's proof and what was kept for it):
    /// signed later, or, both signed in the same millisecond, unless only `other` carries a
    /// revocation (`isOlderView`'s rule for dated views). A view with no signing date counts
    /// as the oldest, and of two with none this one stands.
    public func outranks(_ other: PurchaseFact) -> Bool {
        guard signedDate != nil, other.signedDate != nil else {
            return (signedDate ?? .distantPast) >= (other.signedDate ?? .distantPast)
        }
        return !isOlderView(than: other)
    }

    /// Whether Apple refunded only a share of it (`REFUND_PRORATED`).
    public var isProratedRefund: Bool { revocationDate != nil && revocationType == "REFUND_PRORATED" }

    /// The share of the purchase its refund took, in milliunits of a percent: the prorated
    /// percentage (clamped to 0...100000), else the whole (a full refund, a family
    /// revocation, or data from before Apple said).
    public var refundedShare: Int {
        guard isProratedRefund, let percentage = revocationPercentage else { return 100_000 }
        return min(max(percentage, 0), 100_000)
    }

    /// Apple's price in milliunits (1990 for 1.99) as decimal text; `nil` for a negative one.
    public static func price(milliunits: Int64) -> String? {
        guard milliunits >= 0 else { return nil }
        let fraction = String(milliunits % 1000)
        var decimals = String(repeating: "0", count: 3 - fraction.count) + fraction
        while decimals.hasSuffix("0") { decimals.removeLast() }
        return String(milliunits / 1000) + (decimals.isEmpty ? "" : "." + (decimals.count == 1 ? decimals + "0" : decimals))
    }

    /// A price an app reported (`0.99`, `0,99`, `120`) as decimal text; `nil` when it is not one.
    public static func price(reported text: String) -> String? {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: ",", omittingEmptySubsequences: false)
            .flatMap { $0.split(separator: ".", omittingEmptySubsequences: false) }
        guard (1...2).contains(parts.count), let whole = parts.first, (1...12).contains(whole.count),
            whole.allSatisfy({ $0.isASCII && $0.isNumber }), parts.count == 1 || (1...6).contains(parts[1].count),
            parts.dropFirst().allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } })
        else { return nil }
        return parts.joined(separator: ".")
    }

    /// A currency code an app reported, upper-cased; `nil` when it is not three letters.
    public static func currency(reported text: String) -> String? {
        let code = text.trimmingCharacters(in: .whitespaces).uppercased()
        return code.count == 3 && code.allSatisfy { $0.isASCII && $0.isLetter } ? code : nil
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
    /// What the renewal info says of a commitment (`renewalBillingPlanType`,
    /// `commitmentInfo`): only its renewal-side fields are set.
    public var billingPlan: BillingPlan?
    /// Why the subscription expired (`expirationIntent`), once it has.
    public var expirationReason: ExpirationReason?
    /// A price increase Apple announced for the next renewal (`priceIncreaseStatus`): `false`
    /// while the customer has not agreed, `true` once they have; `nil` when there is none.
    public var priceIncreaseConsented: Bool?

    /// Apple's reasons for an expiry (`expirationIntent` 1 to 5).
    public enum ExpirationReason: String, Sendable, Hashable, Codable {
        case customerCancelled, billingError, priceIncreaseDeclined, productUnavailable, other
    }

    public init(
        originalTransactionId: String, autoRenew: Bool, autoRenewProductId: String? = nil, isInBillingRetry: Bool = false,
        gracePeriodExpiresDate: Date? = nil, signedDate: Date? = nil, billingPlan: BillingPlan? = nil,
        expirationReason: ExpirationReason? = nil, priceIncreaseConsented: Bool? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.autoRenew = autoRenew
        self.autoRenewProductId = autoRenewProductId
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.signedDate = signedDate
        self.billingPlan = billingPlan
        self.expirationReason = expirationReason
        self.priceIncreaseConsented = priceIncreaseConsented
    }
}
