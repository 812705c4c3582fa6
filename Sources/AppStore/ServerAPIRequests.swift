// Request bodies of the App Store Server API.

/// Get Notification History: a window of at most 180 days and optional filters.
public struct NotificationHistoryRequest: Codable, Sendable, Hashable {
    public var startDate: AppleTimestamp
    public var endDate: AppleTimestamp
    public var notificationType: NotificationType?
    public var notificationSubtype: NotificationSubtype?
    public var transactionId: String?
    public var onlyFailures: Bool?

    public init(startDate: AppleTimestamp, endDate: AppleTimestamp) {
        self.startDate = startDate
        self.endDate = endDate
    }
}

/// Send Consumption Information V1's body (deprecated by Apple since App Store Server API
/// 1.19 for `ConsumptionRequest` and the V2 endpoint). Values are Apple's codes.
public struct ConsumptionRequestV1: Codable, Sendable, Hashable {
    public var customerConsented: Bool
    public var consumptionStatus: Int
    public var platform: Int
    public var sampleContentProvided: Bool
    public var deliveryStatus: Int
    public var appAccountToken: String
    public var accountTenure: Int
    public var playTime: Int
    public var lifetimeDollarsRefunded: Int
    public var lifetimeDollarsPurchased: Int
    public var userStatus: Int
    public var refundPreference: Int?

    public init(
        customerConsented: Bool, consumptionStatus: Int = 0, platform: Int = 1, sampleContentProvided: Bool = false,
        deliveryStatus: Int = 0, appAccountToken: String = "", accountTenure: Int = 0, playTime: Int = 0,
        lifetimeDollarsRefunded: Int = 0, lifetimeDollarsPurchased: Int = 0, userStatus: Int = 0, refundPreference: Int? = nil
    ) {
        self.customerConsented = customerConsented
        self.consumptionStatus = consumptionStatus
        self.platform = platform
        self.sampleContentProvided = sampleContentProvided
        self.deliveryStatus = deliveryStatus
        self.appAccountToken = appAccountToken
        self.accountTenure = accountTenure
        self.playTime = playTime
        self.lifetimeDollarsRefunded = lifetimeDollarsRefunded
        self.lifetimeDollarsPurchased = lifetimeDollarsPurchased
        self.userStatus = userStatus
        self.refundPreference = refundPreference
    }
}

/// Extend a Subscription Renewal Date.
public struct ExtendRenewalDateRequest: Codable, Sendable, Hashable {
    /// 1 to 90 days.
    public var extendByDays: Int
    /// 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
    public var extendReasonCode: Int
    /// A UUID; Apple deduplicates retries by it.
    public var requestIdentifier: String

    public init(extendByDays: Int, extendReasonCode: Int, requestIdentifier: String) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
    }
}

/// Set App Account Token's body (Apple's `UpdateAppAccountTokenRequest`).
public struct UpdateAppAccountTokenRequest: Codable, Sendable, Hashable {
    /// A UUID; Apple refuses anything else (4000183).
    public var appAccountToken: String

    public init(appAccountToken: String) { self.appAccountToken = appAccountToken }
}
