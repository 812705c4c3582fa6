import Foundation
import X509

/// Tells what a piece of Apple purchase data is and whether it verifies, without being told
/// its kind: a V2 notification (bare or as Apple posts it), a signed transaction, renewal
/// info or app transaction, an app receipt, or an iOS 6 transaction receipt.
public struct AppleDataInspector: Sendable {
    /// What the data is.
    public enum Kind: String, Sendable {
        case notification, transaction, renewalInfo, appTransaction, receipt, transactionReceipt, unknown
    }

    /// The verdict and the fields that apply to the kind.
    public struct Inspection: Sendable {
        public var kind: Kind
        public var valid: Bool
        /// Why it is not valid, or nil.
        public var reason: String?
        public var environment: String?
        public var bundleId: String?
        public var transactionId: String?
        public var originalTransactionId: String?
        public var productId: String?
        public var notificationType: String?
        public var subtype: String?
        /// An app transaction (alone, in Get App Transaction Info's response, or in a
        /// `RESCIND_CONSENT` notification's `appData`), once verified.
        public var appTransaction: AppTransaction?

        init(kind: Kind) {
            self.kind = kind
            self.valid = false
        }
    }

    let signedData: SignedDataVerifier
    let receipts: AppReceiptVerifier

    /// - Parameters:
    ///   - roots: replace Apple's roots (for both signed data and receipts); receipts signed by
    ///     one of them directly (Xcode) are then accepted.
    ///   - at: check certificates at this time instead of the data's own signing date.
    ///   - allowTestEnvironments: accept Xcode and LocalTesting data.
    public init(bundleId: String? = nil, roots: [Certificate]? = nil, at time: Date? = nil, allowTestEnvironments: Bool = false) {
        var signed = SignedDataVerifier.Configuration(bundleId: bundleId, roots: roots ?? AppleRootCertificates.signedDataRoots)
        if let time { signed.validationTime = .fixed(time) }
        if allowTestEnvironments { signed.allowedTestEnvironments = [.xcode, .localTesting] }
        signedData = SignedDataVerifier(configuration: signed)
        var receipt = AppReceiptVerifier.Configuration(bundleId: bundleId, roots: roots ?? AppleRootCertificates.receiptRoots)
        if let time { receipt.validationTime = .fixed(time) }
        receipt.allowXcode = roots != nil || allowTestEnvironments
        receipts = AppReceiptVerifier(configuration: receipt)
    }

    public func inspect(_ text: String) async -> Inspection {
        let text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("{") {
            // A notification as Apple posts it, or Get App Transaction Info's response.
            struct Posted: Decodable {
                var signedPayload: String?
                var signedAppTransactionInfo: String?
            }
            let posted = try? JSONDecoder().decode(Posted.self, from: Data(text.utf8))
            if let signed = posted?.signedPayload { return await inspectJWS(signed, kind: .notification) }
            if let signed = posted?.signedAppTransactionInfo { return await inspectJWS(signed, kind: .appTransaction) }
            var inspection = Inspection(kind: .unknown)
            inspection.reason =
                "JSON without a signedPayload or signedAppTransactionInfo (V1 notifications are not signed and cannot be verified)"
            return inspection
        }
        if text.split(separator: ".", omittingEmptySubsequences: false).count == 3 {
            return await inspectJWS(text, kind: Self.guessKind(ofJWS: text))
        }
        guard let bytes = AppleBase64.decode(text), !bytes.isEmpty else {
            var inspection = Inspection(kind: .unknown)
            inspection.reason = "neither a JWS, a notification body, nor base64 receipt data"
            return inspection
        }
        if LegacyTransactionReceipt.looksLikeTransactionReceipt(bytes) {
            var inspection = Inspection(kind: .transactionReceipt)
            do {
                let receipt = try LegacyTransactionReceipt(base64: text)
                inspection.reason = "iOS 6 transaction receipts cannot be verified locally; send them to verifyReceipt"
                inspection.environment = receipt.environment ?? "Production"
                inspection.bundleId = receipt.bundleId
                inspection.transactionId = receipt.transactionId
                inspection.originalTransactionId = receipt.originalTransactionId
                inspection.productId = receipt.productId
            } catch {
                inspection.reason = error.message
            }
            return inspection
        }
        var inspection = Inspection(kind: .receipt)
        do {
            let receipt = try await receipts.verify(der: bytes)
            inspection.valid = true
            inspection.environment = receipt.environment?.rawValue
            inspection.bundleId = receipt.bundleId
            let latest = receipt.inAppPurchases.max {
                ($0.purchaseDate ?? .init(milliseconds: 0)) < ($1.purchaseDate ?? .init(milliseconds: 0))
            }
            inspection.transactionId = latest?.transactionId
            inspection.originalTransactionId = latest?.originalTransactionId
            inspection.productId = latest?.productId
        } catch {
            inspection.reason = error.message
        }
        return inspection
    }

    private func inspectJWS(_ jws: String, kind: Kind) async -> Inspection {
        var inspection = Inspection(kind: kind)
        do {
            switch kind {
            case .notification:
                let payload = try await signedData.verifyNotification(jws)
                inspection.notificationType = payload.notificationType?.rawValue
                inspection.subtype = payload.subtype?.rawValue
                inspection.environment = payload.payloadEnvironment?.rawValue
                inspection.bundleId = payload.payloadBundleId
                if let nested = payload.data?.signedTransactionInfo {
                    let transaction = try await signedData.verifyTransaction(nested)
                    inspection.transactionId = transaction.transactionId
                    inspection.originalTransactionId = transaction.originalTransactionId
                    inspection.productId = transaction.productId
                }
                if let nested = payload.appData?.signedAppTransactionInfo {
                    inspection.appTransaction = try await signedData.verifyAppTransaction(nested)
                }
            case .renewalInfo:
                let renewal = try await signedData.verifyRenewalInfo(jws)
                inspection.environment = renewal.environment?.rawValue
                inspection.originalTransactionId = renewal.originalTransactionId
                inspection.productId = renewal.productId
            case .appTransaction:
                let app = try await signedData.verifyAppTransaction(jws)
                inspection.environment = app.receiptType?.rawValue
                inspection.bundleId = app.bundleId
                inspection.appTransaction = app
            default:
                let transaction = try await signedData.verifyTransaction(jws)
                inspection.environment = transaction.environment?.rawValue
                inspection.bundleId = transaction.bundleId
                inspection.transactionId = transaction.transactionId
                inspection.originalTransactionId = transaction.originalTransactionId
                inspection.productId = transaction.productId
            }
            inspection.valid = true
        } catch {
            inspection.reason = error.message
        }
        return inspection
    }

    /// The kind a JWS claims to be, from its (not yet verified) payload's fields.
    static func guessKind(ofJWS jws: String) -> Kind {
        struct Fields: Decodable {
            var notificationType: String?
            var receiptType: String?
            var transactionId: String?
            var autoRenewStatus: Int?
            var autoRenewProductId: String?
        }
        guard let token = try? CompactJWS(jws), let fields: Fields = try? token.decodePayload() else { return .transaction }
        if fields.notificationType != nil { return .notification }
        if fields.receiptType != nil { return .appTransaction }
        if fields.transactionId == nil, fields.autoRenewStatus != nil || fields.autoRenewProductId != nil { return .renewalInfo }
        return .transaction
    }
}
