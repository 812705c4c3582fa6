/// An App Store Server Notification V2, decoded from a verified `signedPayload`
/// (Apple's `ResponseBodyV2DecodedPayload`).
public struct NotificationPayload: SignedPayload, Codable, Hashable {
    public init() {}

    public var notificationType: NotificationType?
    public var subtype: NotificationSubtype?
    /// Unique per notification; Apple resends with the same UUID, so it is the idempotency key.
    public var notificationUUID: String?
    public var data: NotificationData?
    public var summary: NotificationSummary?
    public var externalPurchaseToken: ExternalPurchaseToken?
    public var appData: AppData?
    public var version: String?
    public var signedDate: AppleTimestamp?

    public var payloadEnvironment: AppStoreEnvironment? {
        data?.environment ?? summary?.environment ?? appData?.environment ?? externalPurchaseToken?.environment
    }
    public var payloadBundleId: String? {
        data?.bundleId ?? summary?.bundleId ?? appData?.bundleId ?? externalPurchaseToken?.bundleId
    }
    public var payloadAppAppleId: Int64? {
        data?.appAppleId ?? summary?.appAppleId ?? appData?.appAppleId ?? externalPurchaseToken?.appAppleId
    }
    /// Every notification names its type (a transaction or renewal info decoded as one does not).
    public var kindProblem: String? {
        notificationType == nil ? "Apple-signed but not a notification (no notificationType)" : nil
    }
}

/// The app and purchase a notification is about.
public struct NotificationData: Codable, Sendable, Hashable {
    public init() {}

    public var environment: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var bundleVersion: String?
    /// Still signed: verify with ``SignedDataVerifier/verifyTransaction(_:)``.
    public var signedTransactionInfo: String?
    /// Still signed: verify with ``SignedDataVerifier/verifyRenewalInfo(_:)``.
    public var signedRenewalInfo: String?
    public var status: SubscriptionStatus?
    public var consumptionRequestReason: ConsumptionRequestReason?
}

/// The outcome of a renewal-date extension for all subscribers (`RENEWAL_EXTENSION` / `SUMMARY`).
public struct NotificationSummary: Codable, Sendable, Hashable {
    public init() {}

    public var environment: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var productId: String?
    public var requestIdentifier: String?
    public var storefrontCountryCodes: [String]?
    public var succeededCount: Int64?
    public var failedCount: Int64?
}

/// The app a notification without a purchase is about (`RESCIND_CONSENT`).
public struct AppData: Codable, Sendable, Hashable {
    public init() {}

    public var environment: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var signedAppTransactionInfo: String?
}

/// An external purchase token (`EXTERNAL_PURCHASE_TOKEN`).
public struct ExternalPurchaseToken: Codable, Sendable, Hashable {
    public init() {}

    public var externalPurchaseId: String?
    public var tokenCreationDate: AppleTimestamp?
    public var appAppleId: Int64?
    public var bundleId: String?
    /// Custom link tokens only: `SERVICES` or `ACQUISITION`, and when the token expires.
    public var tokenType: String?
    public var tokenExpirationDate: AppleTimestamp?

    /// Apple marks sandbox tokens by an id starting with `SANDBOX`.
    public var environment: AppStoreEnvironment {
        externalPurchaseId?.hasPrefix("SANDBOX") == true ? .sandbox : .production
    }
}
