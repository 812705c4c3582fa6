/// A verifyReceipt response, in both forms Apple has sent: iOS 7 app receipts (`receipt.in_app`,
/// `latest_receipt_info` arrays) and iOS 6 transaction receipts (the receipt itself a transaction,
/// `latest_receipt_info` an object). Every number arrives as a string; some samples in the wild
/// send JSON numbers, which decode too.
public struct VerifyReceiptResponse: Decodable, Sendable, Hashable {
    public var status: Int
    public var environment: String?
    public var receipt: VerifyReceiptReceipt?
    public var latestReceiptInfo: [VerifyReceiptTransaction]?
    public var latestReceipt: String?
    public var pendingRenewalInfo: [VerifyReceiptPendingRenewal]?
    public var isRetryable: Bool?

    enum CodingKeys: String, CodingKey {
        case status, environment, receipt
        case latestReceiptInfo = "latest_receipt_info"
        case latestExpiredReceiptInfo = "latest_expired_receipt_info"
        case latestReceipt = "latest_receipt"
        case pendingRenewalInfo = "pending_renewal_info"
        case isRetryable = "is-retryable"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        status = Int(try container.lenientString(.status) ?? "") ?? -1
        environment = try container.lenientString(.environment)
        receipt = try container.decodeIfPresent(VerifyReceiptReceipt.self, forKey: .receipt)
        if let list = try? container.decodeIfPresent([VerifyReceiptTransaction].self, forKey: .latestReceiptInfo) {
            latestReceiptInfo = list
        } else if let single = try container.decodeIfPresent(VerifyReceiptTransaction.self, forKey: .latestReceiptInfo)
            ?? container.decodeIfPresent(VerifyReceiptTransaction.self, forKey: .latestExpiredReceiptInfo)
        {
            latestReceiptInfo = [single]
        }
        latestReceipt = try container.lenientString(.latestReceipt)
        pendingRenewalInfo = try container.decodeIfPresent([VerifyReceiptPendingRenewal].self, forKey: .pendingRenewalInfo)
        isRetryable = try container.lenientString(.isRetryable).map { $0 == "true" || $0 == "1" }
    }
}

/// The `receipt` object of a verifyReceipt response.
public struct VerifyReceiptReceipt: Decodable, Sendable, Hashable {
    public var receiptType: String?
    public var bundleId: String?
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var receiptCreationDate: AppleTimestamp?
    public var requestDate: AppleTimestamp?
    public var inApp: [VerifyReceiptTransaction]
    /// For iOS 6 transaction receipts, the receipt is the transaction.
    public var transaction: VerifyReceiptTransaction?

    enum CodingKeys: String, CodingKey {
        case receiptType = "receipt_type", bundleId = "bundle_id", bid, applicationVersion = "application_version", bvrs
        case originalApplicationVersion = "original_application_version"
        case receiptCreationDate = "receipt_creation_date_ms", requestDate = "request_date_ms"
        case inApp = "in_app", transactionId = "transaction_id"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        receiptType = try container.lenientString(.receiptType)
        bundleId = try container.lenientString(.bundleId) ?? container.lenientString(.bid)
        applicationVersion = try container.lenientString(.applicationVersion) ?? container.lenientString(.bvrs)
        originalApplicationVersion = try container.lenientString(.originalApplicationVersion)
        receiptCreationDate = try container.lenientTimestamp(.receiptCreationDate)
        requestDate = try container.lenientTimestamp(.requestDate)
        inApp = try container.decodeIfPresent([VerifyReceiptTransaction].self, forKey: .inApp) ?? []
        transaction = container.contains(.transactionId) ? try VerifyReceiptTransaction(from: decoder) : nil
    }
}

/// One purchase in `in_app` or `latest_receipt_info`.
public struct VerifyReceiptTransaction: Decodable, Sendable, Hashable {
    public var quantity: Int?
    public var productId: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    public var purchaseDate: AppleTimestamp?
    public var originalPurchaseDate: AppleTimestamp?
    public var expiresDate: AppleTimestamp?
    public var cancellationDate: AppleTimestamp?
    public var cancellationReason: String?
    public var webOrderLineItemId: String?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var isUpgraded: Bool?
    public var promotionalOfferId: String?
    public var offerCodeRefName: String?
    public var subscriptionGroupIdentifier: String?
    public var inAppOwnershipType: InAppOwnershipType?
    public var appAccountToken: String?

    enum CodingKeys: String, CodingKey {
        case quantity, productId = "product_id", transactionId = "transaction_id"
        case originalTransactionId = "original_transaction_id"
        case purchaseDate = "purchase_date_ms", originalPurchaseDate = "original_purchase_date_ms"
        case expiresDate = "expires_date_ms", expiresDateIOS6 = "expires_date"
        case cancellationDate = "cancellation_date_ms", cancellationReason = "cancellation_reason"
        case webOrderLineItemId = "web_order_line_item_id"
        case isTrialPeriod = "is_trial_period", isInIntroOfferPeriod = "is_in_intro_offer_period", isUpgraded = "is_upgraded"
        case promotionalOfferId = "promotional_offer_id", offerCodeRefName = "offer_code_ref_name"
        case subscriptionGroupIdentifier = "subscription_group_identifier"
        case inAppOwnershipType = "in_app_ownership_type", appAccountToken = "app_account_token"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        quantity = try container.lenientString(.quantity).flatMap { Int($0) }
        productId = try container.lenientString(.productId)
        transactionId = try container.lenientString(.transactionId)
        originalTransactionId = try container.lenientString(.originalTransactionId)
        purchaseDate = try container.lenientTimestamp(.purchaseDate)
        originalPurchaseDate = try container.lenientTimestamp(.originalPurchaseDate)
        // iOS 6 responses put milliseconds in `expires_date`; iOS 7 a date string there.
        expiresDate = try container.lenientTimestamp(.expiresDate) ?? container.lenientTimestamp(.expiresDateIOS6)
        cancellationDate = try container.lenientTimestamp(.cancellationDate)
        cancellationReason = try container.lenientString(.cancellationReason)
        webOrderLineItemId = try container.lenientString(.webOrderLineItemId)
        isTrialPeriod = try container.lenientBool(.isTrialPeriod)
        isInIntroOfferPeriod = try container.lenientBool(.isInIntroOfferPeriod)
        isUpgraded = try container.lenientBool(.isUpgraded)
        promotionalOfferId = try container.lenientString(.promotionalOfferId)
        offerCodeRefName = try container.lenientString(.offerCodeRefName)
        subscriptionGroupIdentifier = try container.lenientString(.subscriptionGroupIdentifier)
        inAppOwnershipType = try container.lenientString(.inAppOwnershipType).map(InAppOwnershipType.init(rawValue:))
        appAccountToken = try container.lenientString(.appAccountToken)
    }
}

/// One entry of `pending_renewal_info`.
public struct VerifyReceiptPendingRenewal: Decodable, Sendable, Hashable {
    public var autoRenewProductId: String?
    public var productId: String?
    public var originalTransactionId: String?
    public var autoRenewStatus: Bool?
    public var expirationIntent: String?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: AppleTimestamp?
    /// `price_consent_status`: "0" not yet, "1" agreed to a price increase; absent when none.
    public var priceConsentStatus: String?

    enum CodingKeys: String, CodingKey {
        case autoRenewProductId = "auto_renew_product_id", productId = "product_id"
        case originalTransactionId = "original_transaction_id", autoRenewStatus = "auto_renew_status"
        case expirationIntent = "expiration_intent", isInBillingRetryPeriod = "is_in_billing_retry_period"
        case gracePeriodExpiresDate = "grace_period_expires_date_ms", priceConsentStatus = "price_consent_status"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        autoRenewProductId = try container.lenientString(.autoRenewProductId)
        productId = try container.lenientString(.productId)
        originalTransactionId = try container.lenientString(.originalTransactionId)
        autoRenewStatus = try container.lenientBool(.autoRenewStatus)
        expirationIntent = try container.lenientString(.expirationIntent)
        isInBillingRetryPeriod = try container.lenientBool(.isInBillingRetryPeriod)
        gracePeriodExpiresDate = try container.lenientTimestamp(.gracePeriodExpiresDate)
        priceConsentStatus = try container.lenientString(.priceConsentStatus)
    }
}

extension KeyedDecodingContainer {
    /// A scalar as text, whether Apple sent a string, a number or a boolean.
    func lenientString(_ key: Key) throws -> String? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let text = try? decode(String.self, forKey: key) { return text }
        if let whole = try? decode(Int64.self, forKey: key) { return String(whole) }
        if let number = try? decode(Double.self, forKey: key) { return String(number) }
        if let flag = try? decode(Bool.self, forKey: key) { return String(flag) }
        return nil
    }

    func lenientBool(_ key: Key) throws -> Bool? {
        switch try lenientString(key)?.lowercased() {
        case "true", "1": true
        case "false", "0": false
        default: nil
        }
    }

    func lenientTimestamp(_ key: Key) throws -> AppleTimestamp? {
        guard let text = try lenientString(key) else { return nil }
        if let whole = Int64(text) { return AppleTimestamp(milliseconds: whole) }
        if let number = Double(text), number.isFinite { return AppleTimestamp(milliseconds: AppleTimestamp.milliseconds(number)) }
        return nil
    }
}
