import AppStore
import Entitlements
import Foundation

/// Verified Apple data in the domain's terms. Every road (StoreKit 2 JWS, the App Store
/// Server API, an app receipt, verifyReceipt) ends in the same `PurchaseFact`.
package enum AppleFacts {
    /// Why Apple's data cannot become a fact.
    package struct Incomplete: Error, Sendable, Hashable {
        package let field: String
        package init(field: String) { self.field = field }
    }

    /// From a verified StoreKit 2 transaction.
    package static func purchase(_ transaction: JWSTransaction) throws(Incomplete) -> PurchaseFact {
        guard let transactionId = transaction.transactionId else { throw Incomplete(field: "transactionId") }
        guard let productId = transaction.productId else { throw Incomplete(field: "productId") }
        guard let bundleId = transaction.bundleId else { throw Incomplete(field: "bundleId") }
        guard let type = transaction.type, let kind = ProductKind(rawValue: type.rawValue) else { throw Incomplete(field: "type") }
        guard let purchaseDate = transaction.purchaseDate else { throw Incomplete(field: "purchaseDate") }
        return PurchaseFact(
            transactionId: transactionId, originalTransactionId: transaction.originalTransactionId ?? transactionId,
            productId: productId, bundleId: bundleId, kind: kind, environment: transaction.environment?.rawValue ?? "Production",
            purchaseDate: purchaseDate.date, expiresDate: transaction.expiresDate?.date, quantity: transaction.quantity ?? 1,
            revocationDate: transaction.revocationDate?.date, isUpgraded: transaction.isUpgraded ?? false,
            appAccountToken: transaction.appAccountToken, offerIdentifier: transaction.offerIdentifier,
            isIntroductoryOffer: transaction.offerType == .introductory, isFamilyShared: transaction.inAppOwnershipType == .familyShared,
            signedDate: transaction.signedDate?.date, price: transaction.price.flatMap(PurchaseFact.price(milliunits:)),
            currency: transaction.price == nil ? nil : transaction.currency, offerDiscountType: transaction.offerDiscountType?.rawValue,
            revocationType: transaction.revocationDate == nil ? nil : transaction.revocationType?.rawValue,
            revocationPercentage: transaction.revocationDate == nil ? nil : transaction.revocationPercentage,
            previousOriginalTransactionId: transaction.previousOriginalTransactionId.flatMap {
                $0.isEmpty || $0 == transaction.originalTransactionId ? nil : $0
            }, billingPlan: plan(transaction), storefront: transaction.storefront, offerKind: offerKind(transaction.offerType))
    }

    /// Apple's `offerType` in the domain's terms; `nil` for none or one Apple adds later.
    static func offerKind(_ type: OfferType?) -> PurchaseFact.OfferKind? {
        switch type {
        case .introductory?: .introductory
        case .promotional?: .promotional
        case .offerCode?: .offerCode
        case .winBack?: .winBack
        default: nil
        }
    }

    /// Apple's `expirationIntent` in the domain's terms.
    static func expirationReason(_ intent: ExpirationIntent?) -> RenewalFact.ExpirationReason? {
        switch intent {
        case nil: nil
        case .customerCancelled?: .customerCancelled
        case .billingError?: .billingError
        case .declinedPriceIncrease?: .priceIncreaseDeclined
        case .productUnavailable?: .productUnavailable
        default: .other
        }
    }

    /// A transaction's billing plan, when it says one (`billingPlanType`, `commitmentInfo`).
    static func plan(_ transaction: JWSTransaction) -> BillingPlan? {
        guard transaction.billingPlanType != nil || transaction.commitmentInfo != nil else { return nil }
        var plan = BillingPlan(type: transaction.billingPlanType?.rawValue ?? BillingPlanType.monthly.rawValue)
        let commitment = transaction.commitmentInfo
        plan.period = commitment?.billingPeriodNumber
        plan.periods = commitment?.totalBillingPeriods
        plan.commitmentExpiresDate = commitment?.commitmentExpiresDate?.date
        plan.commitmentPrice = commitment?.commitmentPrice.flatMap(PurchaseFact.price(milliunits:))
        plan.monthlyPrice = transaction.price.flatMap(PurchaseFact.price(milliunits:))
        plan.currency = transaction.currency
        return plan
    }

    /// What a renewal info says of a commitment, when it says anything.
    static func plan(_ info: JWSRenewalInfo) -> BillingPlan? {
        guard info.renewalBillingPlanType != nil || info.commitmentInfo != nil else { return nil }
        var plan = BillingPlan(type: info.renewalBillingPlanType?.rawValue ?? BillingPlanType.monthly.rawValue)
        let commitment = info.commitmentInfo
        plan.renewalBillingPlanType = info.renewalBillingPlanType?.rawValue
        plan.commitmentRenews = commitment?.commitmentAutoRenewStatus.map { $0 == .on }
        plan.commitmentRenewalProductId = commitment?.commitmentAutoRenewProductId
        plan.commitmentRenewalBillingPlanType = commitment?.commitmentRenewalBillingPlanType?.rawValue
        plan.commitmentRenewalDate = commitment?.commitmentRenewalDate?.date
        plan.commitmentRenewalPrice = commitment?.commitmentRenewalPrice.flatMap(PurchaseFact.price(milliunits:))
        return plan
    }

    /// From verified StoreKit 2 renewal info.
    package static func renewal(_ info: JWSRenewalInfo) throws(Incomplete) -> RenewalFact {
        guard let originalTransactionId = info.originalTransactionId else { throw Incomplete(field: "originalTransactionId") }
        return RenewalFact(
            originalTransactionId: originalTransactionId, autoRenew: info.autoRenewStatus == .on,
            autoRenewProductId: info.autoRenewProductId,
            isInBillingRetry: info.isInBillingRetryPeriod ?? false, gracePeriodExpiresDate: info.gracePeriodExpiresDate?.date,
            signedDate: info.signedDate?.date, billingPlan: plan(info), expirationReason: expirationReason(info.expirationIntent),
            priceIncreaseConsented: info.priceIncreaseStatus.map { $0 == .consented })
    }

    /// From one purchase of a locally verified app receipt. Receipts do not say the product
    /// kind: the catalog's offer decides between the kinds an offer can be (`kind`).
    package static func purchase(
        _ item: ReceiptInAppPurchase, bundleId: String, environment: AppStoreEnvironment, kind: ProductKind, receiptDate: Date?
    ) throws(Incomplete) -> PurchaseFact {
        guard let transactionId = item.transactionId else { throw Incomplete(field: "transaction_id") }
        guard let productId = item.productId else { throw Incomplete(field: "product_id") }
        guard let purchaseDate = item.purchaseDate else { throw Incomplete(field: "purchase_date") }
        return PurchaseFact(
            transactionId: transactionId, originalTransactionId: item.originalTransactionId ?? transactionId, productId: productId,
            bundleId: bundleId, kind: kind, environment: environment.rawValue, purchaseDate: purchaseDate.date,
            expiresDate: item.expiresDate?.date, quantity: item.quantity ?? 1, revocationDate: item.cancellationDate?.date,
            offerIdentifier: item.promotionalOfferIdentifier,
            isIntroductoryOffer: item.isInIntroOfferPeriod == true || item.isTrialPeriod == true,
            signedDate: receiptDate, offerDiscountType: item.isTrialPeriod == true ? "FREE_TRIAL" : nil,
            offerKind: item.promotionalOfferIdentifier != nil
                ? .promotional : (item.isInIntroOfferPeriod == true || item.isTrialPeriod == true ? .introductory : nil))
    }

    /// From one transaction of a verifyReceipt answer (`in_app` or `latest_receipt_info`).
    package static func purchase(
        _ item: VerifyReceiptTransaction, bundleId: String, environment: AppStoreEnvironment, kind: ProductKind, requestDate: Date?
    ) throws(Incomplete) -> PurchaseFact {
        guard let transactionId = item.transactionId else { throw Incomplete(field: "transaction_id") }
        guard let productId = item.productId else { throw Incomplete(field: "product_id") }
        guard let purchaseDate = item.purchaseDate else { throw Incomplete(field: "purchase_date_ms") }
        return PurchaseFact(
            transactionId: transactionId, originalTransactionId: item.originalTransactionId ?? transactionId, productId: productId,
            bundleId: bundleId, kind: kind, environment: environment.rawValue, purchaseDate: purchaseDate.date,
            expiresDate: item.expiresDate?.date, quantity: item.quantity ?? 1, revocationDate: item.cancellationDate?.date,
            isUpgraded: item.isUpgraded ?? false, appAccountToken: item.appAccountToken,
            offerIdentifier: item.offerCodeRefName ?? item.promotionalOfferId,
            isIntroductoryOffer: item.isInIntroOfferPeriod == true || item.isTrialPeriod == true,
            isFamilyShared: item.inAppOwnershipType == .familyShared, signedDate: requestDate,
            offerDiscountType: item.isTrialPeriod == true ? "FREE_TRIAL" : nil,
            offerKind: item.offerCodeRefName != nil
                ? .offerCode
                : item.promotionalOfferId != nil
                    ? .promotional : (item.isInIntroOfferPeriod == true || item.isTrialPeriod == true ? .introductory : nil))
    }

    /// From one `pending_renewal_info` entry.
    package static func renewal(_ item: VerifyReceiptPendingRenewal, requestDate: Date?) throws(Incomplete) -> RenewalFact {
        guard let originalTransactionId = item.originalTransactionId else { throw Incomplete(field: "original_transaction_id") }
        return RenewalFact(
            originalTransactionId: originalTransactionId, autoRenew: item.autoRenewStatus ?? false,
            autoRenewProductId: item.autoRenewProductId, isInBillingRetry: item.isInBillingRetryPeriod ?? false,
            gracePeriodExpiresDate: item.gracePeriodExpiresDate?.date, signedDate: requestDate,
            expirationReason: item.expirationIntent.flatMap(Int.init).map { expirationReason(ExpirationIntent(rawValue: $0)) } ?? nil,
            priceIncreaseConsented: item.priceConsentStatus.map { $0 == "1" })
    }
}
