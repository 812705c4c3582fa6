/// An App Store Server API error as Apple answers it: an HTTP status and
/// `{"errorCode", "errorMessage"}`.
public struct AppleAPIError: Error, Sendable, Hashable {
    public var httpStatus: Int
    public var errorCode: Int
    public var errorMessage: String

    public init(httpStatus: Int, errorCode: Int, errorMessage: String) {
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }

    static let invalidTransactionId = Self(httpStatus: 400, errorCode: 4_000_006, errorMessage: "Invalid transaction id.")
    static let invalidRevision = Self(httpStatus: 400, errorCode: 4_000_005, errorMessage: "Invalid request revision.")
    static let invalidPaginationToken = Self(httpStatus: 400, errorCode: 4_000_014, errorMessage: "Invalid pagination token.")
    static let invalidTransactionTypeNotSupported = Self(
        httpStatus: 400, errorCode: 4_000_047,
        errorMessage: "Invalid request. The transaction id parameter represents an unsupported In-App Purchase type.")
    static let transactionIdNotFound = Self(httpStatus: 404, errorCode: 4_040_010, errorMessage: "Transaction id not found.")
    static let originalTransactionIdNotFound = Self(
        httpStatus: 404, errorCode: 4_040_005, errorMessage: "Original transaction id not found.")
    static let testNotificationNotFound = Self(httpStatus: 404, errorCode: 4_040_008, errorMessage: "Test notification not found.")
    static let rateLimitExceeded = Self(httpStatus: 429, errorCode: 4_290_000, errorMessage: "Rate limit exceeded.")
    static let generalInternal = Self(httpStatus: 500, errorCode: 5_000_000, errorMessage: "An unknown error occurred.")

    static func badRequest(_ code: Int, _ message: String) -> Self { Self(httpStatus: 400, errorCode: code, errorMessage: message) }
}
