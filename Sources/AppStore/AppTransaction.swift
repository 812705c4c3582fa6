/// The app's own purchase record, decoded from a verified signed app transaction
/// (Apple's `AppTransaction`).
public struct AppTransaction: SignedPayload, Codable, Hashable {
    public init() {}

    /// The environment; Apple calls it `receiptType` here.
    public var receiptType: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    public var receiptCreationDate: AppleTimestamp?
    public var originalPurchaseDate: AppleTimestamp?
    public var originalApplicationVersion: String?
    public var deviceVerification: String?
    public var deviceVerificationNonce: String?
    public var preorderDate: AppleTimestamp?
    public var appTransactionId: String?
    public var originalPlatform: String?
    public var signedDate: AppleTimestamp?

    public var payloadEnvironment: AppStoreEnvironment? { receiptType }
    public var payloadBundleId: String? { bundleId }
    public var payloadAppAppleId: Int64? { appAppleId }
}
