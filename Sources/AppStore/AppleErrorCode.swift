/// App Store Server API error codes Entitle names (Apple's `errorCode` in an error body,
/// `AppStoreError.apiErrorCode`).
public enum AppleErrorCode {
    /// `InvalidTransactionIdError`.
    public static let invalidTransactionId = 4_000_006
    /// `InvalidTransactionTypeNotSupportedError`: the endpoint does not take this product
    /// type (replaced `InvalidTransactionNotConsumableError`, 4000043, in API 1.11).
    public static let invalidTransactionTypeNotSupported = 4_000_047
    /// `AppTransactionIdNotSupportedError`: the endpoint does not take an app transaction id.
    public static let appTransactionIdNotSupported = 4_000_048
    /// Set App Account Token: the token is not a UUID.
    public static let invalidAppAccountTokenUUID = 4_000_183
    /// Set App Account Token: family-shared transactions are not supported.
    public static let familyTransactionNotSupported = 4_000_185
    /// Set App Account Token: the id is not an original transaction id.
    public static let transactionIdIsNotOriginalTransactionId = 4_000_187
    /// `OriginalTransactionIdNotFoundError`.
    public static let originalTransactionIdNotFound = 4_040_005
    /// `TransactionIdNotFoundError`.
    public static let transactionIdNotFound = 4_040_010
    /// Get App Transaction Info: `AppTransactionDoesNotExistError`.
    public static let appTransactionDoesNotExist = 4_040_019
}
