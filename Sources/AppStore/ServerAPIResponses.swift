// Response bodies of the App Store Server API, one type per Apple object, named as Apple names them.

/// Get Transaction Info.
public struct TransactionInfoResponse: Codable, Sendable, Hashable {
    public init() {}

    public var signedTransactionInfo: String?
}

/// Get App Transaction Info (API 1.17): the customer's signed app transaction.
public struct AppTransactionInfoResponse: Codable, Sendable, Hashable {
    public init() {}

    /// Still signed: verify with ``SignedDataVerifier/verifyAppTransaction(_:)``.
    public var signedAppTransactionInfo: String?
}

/// One page of Get Transaction History (v2).
public struct HistoryResponse: Codable, Sendable, Hashable {
    public init() {}

    /// Pass back to get the next page.
    public var revision: String?
    public var hasMore: Bool?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?
    public var signedTransactions: [String]?
}

/// Get All Subscription Statuses.
public struct StatusResponse: Codable, Sendable, Hashable {
    public init() {}

    public var environment: AppStoreEnvironment?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroupIdentifierItem]?
}

/// The subscriptions of one subscription group.
public struct SubscriptionGroupIdentifierItem: Codable, Sendable, Hashable {
    public init() {}

    public var subscriptionGroupIdentifier: String?
    public var lastTransactions: [LastTransactionsItem]?
}

/// The latest transaction and renewal info of one subscription.
public struct LastTransactionsItem: Codable, Sendable, Hashable {
    public init() {}

    public var status: SubscriptionStatus?
    public var originalTransactionId: String?
    public var signedTransactionInfo: String?
    public var signedRenewalInfo: String?
}

/// One page of Get Refund History (v2).
public struct RefundHistoryResponse: Codable, Sendable, Hashable {
    public init() {}

    public var signedTransactions: [String]?
    public var revision: String?
    public var hasMore: Bool?
}

/// Look Up Order ID.
public struct OrderLookupResponse: Codable, Sendable, Hashable {
    public init() {}

    public var status: OrderLookupStatus?
    public var signedTransactions: [String]?
}

/// Whether an order id was found.
public struct OrderLookupStatus: AppleOpenEnumeration {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let valid = Self(rawValue: 0)
    public static let invalid = Self(rawValue: 1)
}

/// One page of Get Notification History.
public struct NotificationHistoryResponse: Codable, Sendable, Hashable {
    public init() {}

    public var paginationToken: String?
    public var hasMore: Bool?
    public var notificationHistory: [NotificationHistoryResponseItem]?
}

/// One notification Apple sent, with every attempt to deliver it.
public struct NotificationHistoryResponseItem: Codable, Sendable, Hashable {
    public init() {}

    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?
}

/// One delivery attempt.
public struct SendAttemptItem: Codable, Sendable, Hashable {
    public init() {}

    public var attemptDate: AppleTimestamp?
    public var sendAttemptResult: SendAttemptResult?
}

/// Get Test Notification Status.
public struct CheckTestNotificationResponse: Codable, Sendable, Hashable {
    public init() {}

    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?
}

/// Request a Test Notification.
public struct SendTestNotificationResponse: Codable, Sendable, Hashable {
    public init() {}

    public var testNotificationToken: String?
}

/// Extend a Subscription Renewal Date.
public struct ExtendRenewalDateResponse: Codable, Sendable, Hashable {
    public init() {}

    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var success: Bool?
    public var effectiveDate: AppleTimestamp?
}

/// The body of an App Store Server API error.
public struct APIErrorResponse: Codable, Sendable, Hashable {
    public init() {}

    public var errorCode: Int?
    public var errorMessage: String?
}
