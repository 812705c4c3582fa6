/// Send Consumption Information's body (App Store Server API 1.19, `PUT
/// /inApps/v2/transactions/consumption/{transactionId}`): what the developer knows of a
/// purchase whose refund the customer asked for, answering a `CONSUMPTION_REQUEST`.
///
/// Apple's rules: send it only when the customer consented (`customerConsented` is then
/// `true`); `consumptionPercentage` (milliunits, 0 to 100000) never for an auto-renewable
/// subscription, and 0 when `deliveryStatus` is not `DELIVERED`; `GRANT_PRORATED` with a
/// percentage above 0 and below 100000 (Apple computes it from time for subscriptions).
public struct ConsumptionRequest: Codable, Sendable, Hashable {
    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits of a percent: 50000 is half used.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?

    public init(
        customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool, consumptionPercentage: Int? = nil,
        refundPreference: RefundPreference? = nil
    ) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }
}

/// Whether the purchase was delivered and works (`ConsumptionRequest.deliveryStatus`).
public struct DeliveryStatus: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let delivered = Self(rawValue: "DELIVERED")
    public static let undeliveredQualityIssue = Self(rawValue: "UNDELIVERED_QUALITY_ISSUE")
    public static let undeliveredWrongItem = Self(rawValue: "UNDELIVERED_WRONG_ITEM")
    public static let undeliveredServerOutage = Self(rawValue: "UNDELIVERED_SERVER_OUTAGE")
    public static let undeliveredOther = Self(rawValue: "UNDELIVERED_OTHER")
    /// The values Apple documents.
    public static let documented: [Self] = [
        .delivered, .undeliveredQualityIssue, .undeliveredWrongItem, .undeliveredServerOutage, .undeliveredOther,
    ]
}

/// What the developer would like Apple to decide (`ConsumptionRequest.refundPreference`).
public struct RefundPreference: AppleOpenEnumeration {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let decline = Self(rawValue: "DECLINE")
    public static let grantFull = Self(rawValue: "GRANT_FULL")
    public static let grantProrated = Self(rawValue: "GRANT_PRORATED")
    /// The values Apple documents.
    public static let documented: [Self] = [.decline, .grantFull, .grantProrated]
}
