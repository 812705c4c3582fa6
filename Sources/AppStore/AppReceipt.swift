import Crypto
import Foundation

/// An app receipt (the legacy, pre-StoreKit 2 form) decoded from its ASN.1 payload.
public struct AppReceipt: Sendable, Hashable, Codable {
    /// `Production`, `ProductionSandbox`, `Xcode`, ... (attribute 0).
    public var receiptType: String?
    public var appItemId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var opaqueValue: [UInt8]?
    public var sha1Hash: [UInt8]?
    public var creationDate: AppleTimestamp?
    public var expirationDate: AppleTimestamp?
    public var inAppPurchases: [ReceiptInAppPurchase] = []
    /// The bundle id attribute's own bytes: the device hash is computed over them.
    public var bundleIdBytes: [UInt8]?

    public init() {}

    /// The environment the receipt comes from.
    public var environment: AppStoreEnvironment? {
        switch receiptType {
        case "Production": .production
        case "ProductionSandbox", "Sandbox": .sandbox
        case "Xcode": .xcode
        case let other?: AppStoreEnvironment(rawValue: other)
        case nil: nil
        }
    }

    /// Whether the receipt was issued to the device with this identifier (`identifierForVendor`):
    /// SHA-1 of the identifier's 16 bytes, the opaque value and the bundle id bytes.
    public func wasIssued(toDevice identifier: UUID) -> Bool {
        guard let opaqueValue, let bundleIdBytes, let sha1Hash else { return false }
        var input = withUnsafeBytes(of: identifier.uuid) { Array($0) }
        input += opaqueValue
        input += bundleIdBytes
        return Array(Insecure.SHA1.hash(data: input)) == sha1Hash
    }
}

/// One in-app purchase record of an app receipt (attribute 17).
public struct ReceiptInAppPurchase: Sendable, Hashable, Codable {
    public var quantity: Int?
    public var productId: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    public var purchaseDate: AppleTimestamp?
    public var originalPurchaseDate: AppleTimestamp?
    public var expiresDate: AppleTimestamp?
    public var cancellationDate: AppleTimestamp?
    public var webOrderLineItemId: Int64?
    public var isTrialPeriod: Bool?
    /// `nil` in receipts older than the field (2017 and before).
    public var isInIntroOfferPeriod: Bool?
    public var promotionalOfferIdentifier: String?

    public init() {}
}
